// gxu memory in C++: owning gxu storages over backing-device memory, and backing-device
// aliases of gxu memory. These run on every eager gxu op and at both ends of every compiled
// gxu graph, where doing them in Python cost tens of microseconds a call (see memory.py;
// native.py builds this file on first use). Also the one per-launch computation of the cuda
// target's binary launcher (`launch_key`), for the same reason.
//
// Checked against torch 2.11 and 2.13 (TensorImpl, Storage, DataPtr, THPVariable_Wrap,
// pybind11 casters of torch/csrc/utils/pybind.h).
#include <atomic>
#include <cstdint>
#include <unordered_map>

#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/view_native.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace {

std::atomic<int64_t> allocated_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<int64_t> live_storages{0};

// What a gxu storage's memory belongs to: the backing storage it keeps alive.
struct Owned {
  c10::Storage backing;
  int64_t nbytes;
};

void release_owned(void* context) {
  auto* owned = static_cast<Owned*>(context);
  allocated_bytes -= owned->nbytes;
  live_storages -= 1;
  delete owned;
}

// A backing alias's memory belongs to a gxu storage, which the alias keeps alive.
void release_alias(void* context) { delete static_cast<c10::Storage*>(context); }

void raise_peak(int64_t now) {
  int64_t peak = peak_bytes.load();
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

// gxu has one device (index 0).
const c10::Device gxu_device(c10::DeviceType::PrivateUse1, 0);

c10::Storage owning_storage(const c10::Storage& backing) {
  const int64_t nbytes = static_cast<int64_t>(backing.nbytes());
  void* data = backing.data_ptr().get();
  auto* owned = new Owned{backing, nbytes};
  live_storages += 1;
  raise_peak(allocated_bytes += nbytes);
  // Not resizable: a gxu storage never reallocates memory its backing storage owns.
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes,
                      c10::DataPtr(data, owned, &release_owned, gxu_device),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

c10::Storage alias_storage(const c10::Storage& gxu, const c10::Device& device) {
  return c10::Storage(c10::Storage::use_byte_size_t(), gxu.nbytes(),
                      c10::DataPtr(gxu.data_ptr().get(), new c10::Storage(gxu), &release_alias,
                                   device),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

// The gxu storage a backing storage aliases, or nullptr when it aliases none.
const c10::Storage* aliased_gxu_storage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get_deleter() != &release_alias) return nullptr;
  return static_cast<const c10::Storage*>(data.get_context());
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

c10::DispatchKeySet keys_on(const c10::Device& device, c10::ScalarType dtype) {
  return c10::DispatchKeySet(c10::computeDispatchKey(dtype, c10::kStrided, device));
}

// `tensor` (on the backing device) as a gxu tensor: a view of the gxu storage it aliases, or
// of `owners`' gxu storage for its backing storage, else of a new gxu storage owning it.
at::Tensor to_gxu(const at::Tensor& tensor,
                  std::unordered_map<const c10::StorageImpl*, c10::Storage>& owners) {
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

at::Tensor alias(const at::Tensor& gxu, const c10::Device& device) {
  return tensor_over(alias_storage(gxu.storage(), device), gxu,
                     keys_on(device, gxu.scalar_type()));
}

// Each value marked in `on_gxu` that is a tensor on `device` replaced by a gxu tensor over the
// same memory (two values over one backing storage share one gxu storage).
py::tuple leave(const py::tuple& values, const py::tuple& on_gxu, const c10::Device& device) {
  std::unordered_map<const c10::StorageImpl*, c10::Storage> owners;
  py::tuple result(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* value = values[i].ptr();
    if (on_gxu[i].ptr() == Py_True && THPVariable_Check(value)) {
      const at::Tensor& tensor = THPVariable_Unpack(value);
      if (tensor.device() == device) {
        result[i] = py::reinterpret_steal<py::object>(
            THPVariable_Wrap(to_gxu(tensor, owners)));
        continue;
      }
    }
    result[i] = values[i];
  }
  return result;
}

// A value as the backing device sees it: gxu tensors and storages as aliases of their
// memory, the gxu device as the backing device (`device_object`), lists and tuples element
// by element; anything else as it is.
py::object to_backing(const py::handle& value, const c10::Device& device,
                      const py::handle& device_object) {
  PyObject* object = value.ptr();
  if (THPVariable_Check(object)) {
    const at::Tensor& tensor = THPVariable_Unpack(object);
    if (tensor.device().type() != c10::DeviceType::PrivateUse1) {
      return py::reinterpret_borrow<py::object>(value);
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(alias(tensor, device)));
  }
  if (PyList_CheckExact(object) || PyTuple_CheckExact(object)) {
    const bool is_list = PyList_CheckExact(object);
    const Py_ssize_t size = is_list ? PyList_GET_SIZE(object) : PyTuple_GET_SIZE(object);
    py::list mapped(size);
    for (Py_ssize_t i = 0; i < size; ++i) {
      PyObject* item = is_list ? PyList_GET_ITEM(object, i) : PyTuple_GET_ITEM(object, i);
      mapped[i] = to_backing(item, device, device_object);
    }
    return is_list ? py::object(mapped) : py::object(py::tuple(mapped));
  }
  if (THPDevice_Check(object) &&
      reinterpret_cast<THPDevice*>(object)->device.type() == c10::DeviceType::PrivateUse1) {
    return py::reinterpret_borrow<py::object>(device_object);
  }
  if (THPStorage_Check(object)) {
    const c10::Storage& storage = THPStorage_Unpack(object);
    if (storage.device_type() == c10::DeviceType::PrivateUse1) {
      return py::reinterpret_steal<py::object>(THPStorage_Wrap(alias_storage(storage, device)));
    }
  }
  return py::reinterpret_borrow<py::object>(value);
}

// An eager op's arguments for its backing kernel: those at `mapped` ((position, name) pairs,
// by name when passed by keyword) through `to_backing`; a Python number passed for a
// Tensor argument (a name in `tensor_names`) back to the 0-dim tensor the boxed call
// unwrapped.
py::tuple backing_arguments(const py::tuple& args, const py::dict& kwargs, const py::tuple& mapped,
                            const py::frozenset& tensor_names, const c10::Device& device,
                            const py::handle& device_object) {
  py::list backing_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) backing_args[i] = args[i];
  // A copy: py::dict(kwargs) would be the caller's own dict, which the fallback still reads.
  auto backing_kwargs = py::reinterpret_steal<py::dict>(PyDict_Copy(kwargs.ptr()));
  for (const py::handle& entry : mapped) {
    const size_t position = entry[py::int_(0)].cast<size_t>();
    const py::handle name = entry[py::int_(1)];
    if (kwargs.contains(name)) {
      backing_kwargs[name] = to_backing(kwargs[name], device, device_object);
    } else if (position < args.size()) {
      const py::handle value = args[position];
      const bool number = PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()) ||
                          PyFloat_Check(value.ptr()) || PyComplex_Check(value.ptr());
      backing_args[position] = number && tensor_names.contains(name)
          ? py::module_::import("torch").attr("tensor")(value)
          : to_backing(value, device, device_object);
    }
  }
  return py::make_tuple(backing_args, backing_kwargs);
}

at::Tensor own(const at::Tensor& tensor) {
  std::unordered_map<const c10::StorageImpl*, c10::Storage> owners;
  return to_gxu(tensor, owners);
}

// A gxu tensor viewing `storage` (a gxu storage) with the given dtype and geometry.
at::Tensor storage_view(const at::Storage& storage, c10::ScalarType dtype, int64_t offset,
                c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), gxu_keys(), c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return tensor;
}

// -- kernels of the gxu device's hottest ops (the rest go through ops.py's Python fallback) --

// The backing device, fixed by the target on the first gxu allocation (`target.freeze`),
// asked of Python once. Not a function-local static: a thread waiting on its initialisation
// while holding the GIL would deadlock the thread initialising it, which needs the GIL.
std::atomic<bool> backing_known{false};
c10::Device backing{c10::DeviceType::CPU};  // written under the GIL, read once known

const c10::Device& backing_device() {
  if (!backing_known.load(std::memory_order_acquire)) {
    py::gil_scoped_acquire gil;
    if (!backing_known.load(std::memory_order_relaxed)) {
      backing = py::module_::import("gxusim.target").attr("freeze")().cast<c10::Device>();
      backing_known.store(true, std::memory_order_release);
    }
  }
  return backing;
}

at::TensorOptions backing_options(std::optional<c10::ScalarType> dtype,
                                  std::optional<c10::Layout> layout,
                                  std::optional<bool> pin_memory) {
  return at::TensorOptions().dtype(dtype).layout(layout).device(backing_device())
      .pinned_memory(pin_memory);
}

// Allocations: backing memory, owned by a new gxu storage (compiled graphs and eager ops
// allocate every result this way).
at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device>,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  return own(at::empty(C10_AS_INTARRAYREF_SLOW(size),
                       backing_options(dtype, layout, pin_memory), memory_format));
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device>, std::optional<bool> pin_memory) {
  return own(at::empty_strided(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                               backing_options(dtype, layout, pin_memory)));
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

// -- launch keys (gxusim/triton_launch.py) ------------------------------------------------

// What Triton may specialize a compiled kernel on, or finer, one small code per argument: a
// tensor's dtype and 16-byte alignment; an integer's fitting in 32 bits, divisibility by 16
// and being 1; else the argument's type (an integer beyond 64 bits: the value itself). The
// cuda target computes it on every launch, where the same key in Python cost ~2 us.
py::tuple launch_key(const py::handle& args) {
  py::object items = py::reinterpret_steal<py::object>(
      PySequence_Fast(args.ptr(), "launch_key: the launch's arguments must be a sequence"));
  if (!items) throw py::error_already_set();
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(items.ptr());
  PyObject** values = PySequence_Fast_ITEMS(items.ptr());
  py::tuple key(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* value = values[i];
    PyObject* code;
    if (THPVariable_Check(value)) {
      const at::Tensor& tensor = THPVariable_Unpack(value);
      const bool aligned = (reinterpret_cast<uintptr_t>(tensor.data_ptr()) & 15) == 0;
      code = PyLong_FromLong(64 + 2 * static_cast<long>(tensor.scalar_type()) + aligned);
    } else if (PyLong_CheckExact(value)) {
      int overflow = 0;
      const long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow) {
        code = Py_NewRef(value);
      } else {
        const bool int32 = number >= INT32_MIN && number <= INT32_MAX;
        code = PyLong_FromLong(4 * int32 + 2 * (number % 16 == 0) + (number == 1));
      }
    } else {
      code = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(value)));
    }
    if (!code) throw py::error_already_set();
    PyTuple_SET_ITEM(key.ptr(), i, code);
  }
  return key;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("as_strided", TORCH_FN(as_strided));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("leave", &leave, "backing tensors of a tuple as gxu tensors over their memory");
  module.def("to_backing", &to_backing, "a value as the backing device sees it");
  module.def("backing_arguments", &backing_arguments, "an eager op's arguments for its backing kernel");
  module.def("own", &own, "a backing tensor as a gxu tensor over its memory");
  module.def("alias", &alias, "a gxu tensor as a backing-device tensor over its memory");
  module.def("view", &storage_view, "a gxu tensor viewing a gxu storage");
  module.def("allocated", [] { return allocated_bytes.load(); });
  module.def("peak", [] { return peak_bytes.load(); });
  module.def("reset_peak", [] { peak_bytes = allocated_bytes.load(); });
  module.def("live", [] { return live_storages.load(); });
  module.def("launch_key", &launch_key, "what Triton may specialize a kernel on, per argument");
}
