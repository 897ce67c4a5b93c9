// The gxu device as torch's backend interfaces see it: the device guard (devices, streams,
// events), the PrivateUse1 hooks (generators, pinned memory, storage resizing), the gxu
// generator, the profiler's device stubs and the tensor metadata torch serialises. What
// torch.cuda does, on either target:
//
// * cuda: gxu work is queued on CUDA streams, so a gxu stream is the CUDA stream of the
//   same id, gxu events are CUDA events, pinned memory is CUDA's, and every call is CUDA's
//   own guard's (registered by libtorch_cuda) with the device translated;
// * emulator: every kernel runs to completion when launched, so streams are ids that order
//   nothing, events are host timestamps, and pinned memory is host memory gxu remembers.
//
// Checked against torch 2.11 and 2.13 (DeviceGuardImplInterface, PrivateUse1HooksInterface,
// GeneratorImpl, ProfilerStubs).
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/csrc/profiler/stubs/base.h>
#include <torch/csrc/utils/pybind.h>

#include "gxu.h"

namespace py = pybind11;

namespace gxu {

// -- the backing device ---------------------------------------------------------------------

// Fixed by the target on the first gxu allocation (`target.freeze`), asked of Python once.
// Not a function-local static: a thread waiting on its initialisation while holding the GIL
// would deadlock the thread initialising it, which needs the GIL.
namespace {
std::atomic<bool> backing_known{false};
c10::Device backing{c10::DeviceType::CPU};  // written under the GIL, read once known

c10::Device ask_target(const char* function) {
  py::gil_scoped_acquire gil;
  return py::module_::import("gxusim.target").attr(function)().cast<c10::Device>();
}
}  // namespace

const c10::Device& backing_device() {
  if (!backing_known.load(std::memory_order_acquire)) {
    py::gil_scoped_acquire gil;
    if (!backing_known.load(std::memory_order_relaxed)) {
      backing = ask_target("freeze");
      backing_known.store(true, std::memory_order_release);
    }
  }
  return backing;
}

namespace {

// Whether gxu memory is (or, before the first allocation, would be) CUDA memory: questions
// that allocate nothing must not fix the target.
bool targets_cuda() {
  if (backing_known.load(std::memory_order_acquire)) return backing.is_cuda();
  return ask_target("backing_device").is_cuda();
}

const c10::impl::DeviceGuardImplInterface* cuda_guard() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

c10::Stream as_cuda(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, backing_device(), stream.id());
}

c10::Stream as_gxu(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, device, stream.id());
}

c10::DeviceIndex cuda_index(c10::DeviceIndex index) {
  return index < 0 ? index : backing_device().index();
}

// The emulator's events: when each was last recorded, and whether it may be timed.
struct HostEvent {
  int64_t recorded_ns = -1;
  bool timing = false;
};

int64_t host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The emulator's streams: ids (0 the default stream), the current one per thread.
std::atomic<c10::StreamId> next_stream_id{1};
thread_local c10::StreamId current_stream_id = 0;

class GuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device d) const override {
    check_index(d.index());
    return device;
  }
  c10::Device getDevice() const override { return device; }
  void setDevice(c10::Device d) const override { check_index(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::DeviceIndex deviceCount() const noexcept override { return device_count; }

  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    check_index(d.index());
    return c10::DeviceCapability();  // every dtype: eager ops run on the backing device
  }

  c10::Stream getStream(c10::Device d) const override {
    check_index(d.index());
    if (targets_cuda()) return as_gxu(cuda_guard()->getStream(backing_device()));
    return c10::Stream(c10::Stream::UNSAFE, device, current_stream_id);
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    check_index(d.index());
    if (targets_cuda()) return as_gxu(cuda_guard()->getDefaultStream(backing_device()));
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    check_index(d.index());
    if (targets_cuda()) {
      return as_gxu(cuda_guard()->getStreamFromGlobalPool(backing_device(), high_priority));
    }
    return getNewStream(d, high_priority ? -1 : 0);
  }

  c10::Stream getNewStream(c10::Device d, int priority) const override {
    check_index(d.index());
    if (targets_cuda()) return as_gxu(cuda_guard()->getNewStream(backing_device(), priority));
    return c10::Stream(c10::Stream::UNSAFE, device, next_stream_id++);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    if (targets_cuda()) return as_gxu(cuda_guard()->exchangeStream(as_cuda(stream)));
    const c10::StreamId previous = current_stream_id;
    current_stream_id = stream.id();
    return c10::Stream(c10::Stream::UNSAFE, device, previous);
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    if (targets_cuda()) return cuda_guard()->getStreamNativeHandle(as_cuda(stream));
    return nullptr;
  }

  bool queryStream(const c10::Stream& stream) const override {
    return targets_cuda() ? cuda_guard()->queryStream(as_cuda(stream)) : true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    if (targets_cuda()) cuda_guard()->synchronizeStream(as_cuda(stream));
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check_index(index);
    if (targets_cuda()) cuda_guard()->synchronizeDevice(backing_device().index());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag flag) const override {
    check_index(index);
    if (targets_cuda()) {
      return cuda_guard()->record(event, as_cuda(stream), cuda_index(index), flag);
    }
    if (*event == nullptr) *event = new HostEvent{-1, flag == c10::EventFlag::BACKEND_DEFAULT};
    static_cast<HostEvent*>(*event)->recorded_ns = host_now_ns();
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (targets_cuda()) cuda_guard()->block(event, as_cuda(stream));
  }

  bool queryEvent(void* event) const override {
    return targets_cuda() ? cuda_guard()->queryEvent(event) : true;
  }

  void synchronizeEvent(void* event) const override {
    if (targets_cuda()) cuda_guard()->synchronizeEvent(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex index) const noexcept override {
    if (event == nullptr) return;
    if (backing_known.load() && backing.is_cuda()) {
      return cuda_guard()->destroyEvent(event, cuda_index(index));
    }
    delete static_cast<HostEvent*>(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex index) const override {
    if (targets_cuda()) return cuda_guard()->elapsedTime(start, end, cuda_index(index));
    const auto* first = static_cast<const HostEvent*>(start);
    const auto* second = static_cast<const HostEvent*>(end);
    TORCH_CHECK(first != nullptr && second != nullptr && first->recorded_ns >= 0 &&
                    second->recorded_ns >= 0,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(first->timing && second->timing,
                "Both events must be created with argument 'enable_timing=True'.");
    return static_cast<double>(second->recorded_ns - first->recorded_ns) / 1e6;
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    const c10::Storage* backing_storage = owned_backing(data);
    if (targets_cuda() && backing_storage != nullptr) {
      cuda_guard()->recordDataPtrOnStream(backing_storage->data_ptr(), as_cuda(stream));
    }
  }
};

// -- the gxu generator ----------------------------------------------------------------------

// A generator of the backing device under a gxu face: seeded before the target is decided,
// it makes its backing generator at the first draw (or state query), seeded the same.
class Generator final : public c10::GeneratorImpl {
 public:
  Generator()
      : c10::GeneratorImpl(gxu::device, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  at::Generator backing_generator() {
    std::lock_guard<std::mutex> lock(backing_mutex_);
    if (!backing_.defined()) {
      const c10::Device& on = backing_device();
      backing_ = on.is_cuda() ? at::detail::getCUDAHooks().getNewGenerator(on.index())
                              : at::detail::createCPUGenerator();
      backing_.set_current_seed(seed_);
    }
    return backing_;
  }

  void set_current_seed(uint64_t seed) override {
    std::lock_guard<std::mutex> lock(backing_mutex_);
    seed_ = seed;
    if (backing_.defined()) backing_.set_current_seed(seed);
  }

  uint64_t current_seed() const override { return seed_; }

  uint64_t seed() override {
    const uint64_t random = c10::detail::getNonDeterministicRandom(targets_cuda());
    set_current_seed(random);
    return random;
  }

  void set_offset(uint64_t offset) override { backing_generator().set_offset(offset); }
  uint64_t get_offset() const override {
    return const_cast<Generator*>(this)->backing_generator().get_offset();
  }

  void set_state(const c10::TensorImpl& state) override {
    backing_generator().unsafeGetGeneratorImpl()->set_state(state);
    seed_ = backing_.current_seed();
  }

  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return const_cast<Generator*>(this)->backing_generator().unsafeGetGeneratorImpl()->get_state();
  }

 private:
  Generator* clone_impl() const override {
    auto* copy = new Generator();
    copy->seed_ = seed_;
    if (backing_.defined()) copy->backing_ = backing_.clone();
    return copy;
  }

  std::mutex backing_mutex_;
  uint64_t seed_ = c10::default_rng_seed_val;
  at::Generator backing_;
};

// -- hooks ----------------------------------------------------------------------------------

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override { return device_count; }
  void setCurrentDevice(c10::DeviceIndex index) const override { check_index(index); }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    check_index(index);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    check_index(index);
    return 0;
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    check_index(index);
    return default_generator();
  }

  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    check_index(index);
    return at::make_generator<Generator>();
  }

  c10::Device getDeviceFromPtr(void*) const override { return device; }

  bool isPinnedPtr(const void* data) const override {
    return targets_cuda() ? at::detail::getCUDAHooks().isPinnedPtr(data) : is_host_pinned(data);
  }

  c10::Allocator* getPinnedMemoryAllocator() const override {
    return targets_cuda() ? at::detail::getCUDAHooks().getPinnedMemoryAllocator()
                          : host_allocator();
  }

  // `untyped_storage().resize_(n)`: gxu storages never grow in place (their memory is the
  // backing storage's), so a resized one gets new memory holding what fits of the old.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
    c10::DataPtr grown = allocator()->allocate(nbytes);
    const size_t kept = std::min(nbytes, impl->nbytes());
    if (kept) allocator()->copy_data(grown.get(), impl->data(), kept);
    impl->set_data_ptr_noswap(std::move(grown));
    impl->set_nbytes(nbytes);
  }
};

// -- profiler -------------------------------------------------------------------------------

// What the profiler records around each op for a device: CUDA events on the cuda target
// (through CUDA's own stubs), host timestamps on the emulator, in microseconds.
class ProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* index, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (cuda_stubs()) {
      cuda_stubs()->record(index, event, cpu_ns);
    } else {
      *event = std::make_shared<int64_t>(host_now_ns());
      if (cpu_ns) *cpu_ns = c10::getTime();
    }
    if (index) *index = 0;
  }

  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* start,
                const torch::profiler::impl::ProfilerVoidEventStub* end) const override {
    if (cuda_stubs()) return cuda_stubs()->elapsed(start, end);
    const auto first = *static_cast<const int64_t*>(start->get());
    const auto second = *static_cast<const int64_t*>(end->get());
    return static_cast<float>(second - first) / 1e3f;
  }

  void mark(const char* name) const override {
    if (cuda_stubs()) cuda_stubs()->mark(name);
  }
  void rangePush(const char* name) const override {
    if (cuda_stubs()) cuda_stubs()->rangePush(name);
  }
  void rangePop() const override {
    if (cuda_stubs()) cuda_stubs()->rangePop();
  }
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override { op(0); }
  void synchronize() const override {
    if (cuda_stubs()) cuda_stubs()->synchronize();
  }

 private:
  // CUDA's stubs where gxu runs on CUDA and libtorch_cuda registered them, else none.
  static const torch::profiler::impl::ProfilerStubs* cuda_stubs() {
    if (!targets_cuda()) return nullptr;
    const auto* stubs = torch::profiler::impl::cudaStubs();
    return stubs->enabled() ? stubs : nullptr;
  }
};

// -- tensor metadata ------------------------------------------------------------------------

// Named flags a gxu tensor carries (`torch._utils.set_tensor_metadata`), the way a backend
// keeps per-tensor state such as a storage format: they travel with `torch.save` and
// `torch.load`, `_copy_backend_meta` and fake tensors.
struct TensorFlags final : c10::BackendMeta {
  std::unordered_map<std::string, bool> flags;

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>&) const override {
    auto copy = c10::make_intrusive<TensorFlags>();
    copy->flags = flags;
    return copy;
  }
};

void read_flags(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  if (auto* meta = dynamic_cast<TensorFlags*>(tensor.unsafeGetTensorImpl()->get_backend_meta())) {
    metadata.insert(meta->flags.begin(), meta->flags.end());
  }
}

void write_flags(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  if (metadata.empty()) return;
  auto meta = c10::make_intrusive<TensorFlags>();
  meta->flags = metadata;
  tensor.unsafeGetTensorImpl()->set_backend_meta(meta);
}

}  // namespace

at::Generator backing_generator(const at::Generator& gxu) {
  return static_cast<Generator*>(gxu.unsafeGetGeneratorImpl())->backing_generator();
}

const at::Generator& default_generator() {
  static const at::Generator generator = at::make_generator<Generator>();
  return generator;
}

void register_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, allocator());
    at::RegisterPrivateUse1HooksInterface(new Hooks());
    c10::impl::registerDeviceGuard(c10::DeviceType::PrivateUse1, new GuardImpl());
    torch::profiler::impl::registerPrivateUse1Methods(new ProfilerStubs());
    torch::jit::GetBackendMetaSerialization()[static_cast<size_t>(
        c10::DeviceType::PrivateUse1)] = std::make_pair(&read_flags, &write_flags);
  });
}

}  // namespace gxu
