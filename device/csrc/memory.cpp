// gxu memory: every gxu storage owns a backing-device storage (host memory on the emulator
// target, CUDA memory on the cuda target), counted the way CUDA's caching allocator counts
// its blocks. Here are the allocator torch allocates gxu storages with (and reads
// torch.accelerator's memory statistics from), pinned host memory for the emulator, and the
// kernels of the allocations and view primitives, which run on every eager op.
//
// Checked against torch 2.11 and 2.13 (Allocator, DeviceAllocator, DeviceStats, Storage).
#include <cstring>
#include <map>
#include <mutex>
#include <unistd.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include "gxu.h"

namespace gxu {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;

// What the allocator counts. gxu memory is one pool: each storage is one block.
struct Statistics {
  std::mutex mutex;
  Stat blocks;
  Stat bytes;
};
Statistics statistics;

struct Owned {
  c10::Storage backing;
  int64_t nbytes;
};

void release_owned(void* context) {
  auto* owned = static_cast<Owned*>(context);
  {
    std::lock_guard<std::mutex> lock(statistics.mutex);
    statistics.blocks.decrease(1);
    statistics.bytes.decrease(owned->nbytes);
  }
  delete owned;
}

}  // namespace

c10::DataPtr owning_data_ptr(c10::Storage backing) {
  const int64_t nbytes = static_cast<int64_t>(backing.nbytes());
  void* data = backing.data_ptr().get();
  {
    std::lock_guard<std::mutex> lock(statistics.mutex);
    statistics.blocks.increase(1);
    statistics.bytes.increase(nbytes);
  }
  return c10::DataPtr(data, new Owned{std::move(backing), nbytes}, &release_owned, device);
}

const c10::Storage* owned_backing(const c10::DataPtr& data) {
  if (data.get_deleter() != &release_owned) return nullptr;
  return &static_cast<const Owned*>(data.get_context())->backing;
}

int64_t allocated_bytes() {
  std::lock_guard<std::mutex> lock(statistics.mutex);
  return statistics.bytes.current;
}

int64_t peak_bytes() {
  std::lock_guard<std::mutex> lock(statistics.mutex);
  return statistics.bytes.peak;
}

int64_t live_blocks() {
  std::lock_guard<std::mutex> lock(statistics.mutex);
  return statistics.blocks.current;
}

namespace {

c10::DeviceAllocator* cuda_allocator() { return c10::getDeviceAllocator(c10::DeviceType::CUDA); }

std::pair<size_t, size_t> host_memory() {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  return {page * static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)),
          page * static_cast<size_t>(sysconf(_SC_PHYS_PAGES))};
}

// The gxu allocator: backing memory from the backing device's own allocator (CUDA's caching
// allocator on the cuda target), owned by a gxu DataPtr.
class Allocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device& backing = backing_device();
    c10::DeviceGuard guard(backing);
    c10::DataPtr data = c10::GetAllocator(backing.type())->allocate(nbytes);
    return owning_data_ptr(c10::Storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                                        /*allocator=*/nullptr, /*resizable=*/false));
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    if (!on_cuda()) {
      std::memcpy(dest, src, count);
      return;
    }
    const auto options = at::TensorOptions().dtype(at::kByte).device(backing_device());
    const auto size = static_cast<int64_t>(count);
    at::from_blob(dest, {size}, options)
        .copy_(at::from_blob(const_cast<void*>(src), {size}, options));
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t mempool_id) override {
    if (on_cuda()) cuda_allocator()->emptyCache(mempool_id);
  }

  void recordStream(const c10::DataPtr& data, c10::Stream stream) override {
    const c10::Storage* backing = owned_backing(data);
    if (on_cuda() && backing != nullptr) {
      const c10::Stream on_cuda(c10::Stream::UNSAFE, backing_device(), stream.id());
      cuda_allocator()->recordStream(backing->data_ptr(), on_cuda);
    }
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    check_index(index);
    c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr auto all = static_cast<size_t>(StatType::AGGREGATE);
    {
      std::lock_guard<std::mutex> lock(statistics.mutex);
      stats.allocation[all] = stats.active[all] = stats.segment[all] = statistics.blocks;
      stats.allocated_bytes[all] = stats.active_bytes[all] = stats.requested_bytes[all] =
          stats.reserved_bytes[all] = statistics.bytes;
    }
    if (on_cuda()) {  // what CUDA's caching allocator holds, gxu storages among it
      stats.reserved_bytes[all] =
          cuda_allocator()->getDeviceStats(backing_device().index()).reserved_bytes[all];
    }
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    check_index(index);
    std::lock_guard<std::mutex> lock(statistics.mutex);
    statistics.blocks.reset_accumulated();
    statistics.bytes.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    check_index(index);
    std::lock_guard<std::mutex> lock(statistics.mutex);
    statistics.blocks.reset_peak();
    statistics.bytes.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    check_index(index);
    return on_cuda() ? cuda_allocator()->getMemoryInfo(backing_device().index()) : host_memory();
  }
};

Allocator gxu_allocator;

// Pinned memory on the emulator: host memory the hooks' `isPinnedPtr` recognises (pinning
// means nothing to a target without a device, but programs ask, and DataLoaders pin).
struct HostBlocks {
  std::mutex mutex;
  std::map<uintptr_t, size_t> sizes;  // start -> bytes
};
HostBlocks host_blocks;

void release_host(void* data) {
  {
    std::lock_guard<std::mutex> lock(host_blocks.mutex);
    host_blocks.sizes.erase(reinterpret_cast<uintptr_t>(data));
  }
  c10::free_cpu(data);
}

class HostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = c10::alloc_cpu(nbytes);
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(host_blocks.mutex);
      host_blocks.sizes[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return c10::DataPtr(data, data, &release_host, c10::Device(c10::DeviceType::CPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release_host; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

HostAllocator gxu_host_allocator;

}  // namespace

c10::Allocator* allocator() { return &gxu_allocator; }
c10::Allocator* host_allocator() { return &gxu_host_allocator; }

bool is_host_pinned(const void* data) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(host_blocks.mutex);
  auto after = host_blocks.sizes.upper_bound(address);
  if (after == host_blocks.sizes.begin()) return false;
  const auto& [start, size] = *std::prev(after);
  return address < start + std::max<size_t>(size, 1);
}

// -- gxu storages over backing memory, and backing aliases of gxu memory ------------------
namespace {

// A backing alias's memory belongs to a gxu storage, which the alias keeps alive.
void release_alias(void* context) { delete static_cast<c10::Storage*>(context); }

// The gxu storage a backing storage aliases, or nullptr when it aliases none.
const c10::Storage* aliased_gxu_storage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get_deleter() != &release_alias) return nullptr;
  return static_cast<const c10::Storage*>(data.get_context());
}

c10::Storage owning_storage(const c10::Storage& backing) {
  // Not resizable: a gxu storage never reallocates memory its backing storage owns.
  return c10::Storage(c10::Storage::use_byte_size_t(), backing.nbytes(), owning_data_ptr(backing),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

at::Tensor tensor_over(c10::Storage storage, const at::Tensor& like, c10::DispatchKeySet keys) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), keys, like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(),
                                                       like.storage_offset());
  // Lazy conjugate/negative bits are part of what a tensor means (conj(), fft, conj-aware
  // matmuls read them); a new tensor over the same memory must carry them.
  if (like.is_conj()) tensor._set_conj(true);
  if (like.is_neg()) tensor._set_neg(true);
  return tensor;
}

c10::DispatchKeySet gxu_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

}  // namespace

c10::Storage alias_storage(const c10::Storage& gxu, const c10::Device& on) {
  return c10::Storage(c10::Storage::use_byte_size_t(), gxu.nbytes(),
                      c10::DataPtr(gxu.data_ptr().get(), new c10::Storage(gxu), &release_alias, on),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

at::Tensor to_gxu(const at::Tensor& tensor, Owners& owners) {
  const c10::Storage& storage = tensor.storage();
  if (const c10::Storage* gxu = aliased_gxu_storage(storage)) {
    return tensor_over(*gxu, tensor, gxu_keys());
  }
  auto found = owners.find(storage.unsafeGetStorageImpl());
  if (found == owners.end()) {
    found = owners.emplace(storage.unsafeGetStorageImpl(), owning_storage(storage)).first;
  }
  return tensor_over(found->second, tensor, gxu_keys());
}

at::Tensor own(const at::Tensor& tensor) {
  Owners owners;
  return to_gxu(tensor, owners);
}

at::Tensor alias(const at::Tensor& gxu, const c10::Device& on) {
  const auto key = c10::computeDispatchKey(gxu.scalar_type(), c10::kStrided, on);
  return tensor_over(alias_storage(gxu.storage(), on), gxu, c10::DispatchKeySet(key));
}

at::Tensor storage_view(const at::Storage& storage, c10::ScalarType dtype, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), gxu_keys(), c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return tensor;
}

void check_index(c10::DeviceIndex index) {
  if (index == -1 || index == 0) return;
  // The message is joined from strings: streaming a number into it (c10::str's ostream)
  // crashed in this module on the GPU machine's image (torch 2.11, whose libstdc++ parts
  // linked into torch's libraries differ from the compiler's own).
  TORCH_CHECK(false, "gxu device index " + std::to_string(index) + " is invalid: The device "
                     "index is out of range (torch.gxu.device_count() is " +
                     std::to_string(device_count) + ", so the only gxu device is gxu:0)");
}

// -- kernels of the gxu device's hottest ops (the rest go through ops.py's Python fallback) --
namespace {

at::TensorOptions backing_options(std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout,
                                  std::optional<c10::Device> device,
                                  std::optional<bool> pin_memory) {
  if (device) check_index(device->index());
  return at::TensorOptions().dtype(dtype).layout(layout).device(backing_device())
      .pinned_memory(pin_memory);
}

// Allocations: backing memory, owned by a new gxu storage (compiled graphs and eager ops
// allocate every result this way).
at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  return own(at::empty(C10_AS_INTARRAYREF_SLOW(size),
                              backing_options(dtype, layout, device, pin_memory), memory_format));
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  return own(at::empty_strided(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                      backing_options(dtype, layout, device, pin_memory)));
}

// View primitives: their CPU kernels make the view from the tensor's own storage and keys
// without touching memory, so they serve gxu as they are. transpose, permute, expand,
// select, slice, squeeze and the other composite views all end in one of them.
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      storage_offset ? std::optional<int64_t>(storage_offset->expect_int()) : std::nullopt);
}

// `a.data = b` between gxu and a dense CPU or CUDA tensor swaps what `a` is, as between CPU
// and CUDA (TensorImpl's own rule lists the in-tree dense backends only).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& tensor) {
    return tensor.layout() == c10::kStrided &&
           (tensor.is_cpu() || tensor.is_cuda() || tensor.is_privateuseone());
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self) && dense(from));
}

}  // namespace
}  // namespace gxu

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(gxu::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(gxu::empty_strided));
  m.impl("view", TORCH_FN(gxu::view));
  m.impl("_reshape_alias", TORCH_FN(gxu::reshape_alias));
  m.impl("as_strided", TORCH_FN(gxu::as_strided));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(gxu::has_compatible_shallow_copy_type));
}
