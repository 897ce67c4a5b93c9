// The Python module of the gxu device's C++ part (`gxusim.device.native`): gxu values to
// and from the backing device (every eager op and both ends of every compiled graph pass
// through these), allocation statistics, the backend registration, and the cuda target's
// per-launch key (`launch_key`), for the same reason: Python cost microseconds a call.
//
// Checked against torch 2.11 and 2.13 (THPVariable_Wrap, THPGenerator, THPStorage,
// pybind11 casters of torch/csrc/utils/pybind.h).
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include "gxu.h"

namespace py = pybind11;

namespace gxu {
namespace {

// Each value marked in `on_gxu` that is a tensor on `on` replaced by a gxu tensor over the
// same memory (two values over one backing storage share one gxu storage).
py::tuple leave(const py::tuple& values, const py::tuple& on_gxu, const c10::Device& on) {
  Owners owners;
  py::tuple result(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    PyObject* value = values[i].ptr();
    if (on_gxu[i].ptr() == Py_True && THPVariable_Check(value)) {
      const at::Tensor& tensor = THPVariable_Unpack(value);
      if (tensor.device() == on) {
        result[i] = py::reinterpret_steal<py::object>(THPVariable_Wrap(to_gxu(tensor, owners)));
        continue;
      }
    }
    result[i] = values[i];
  }
  return result;
}

// A value as the backing device sees it: gxu tensors and storages as aliases of their
// memory, gxu generators as the backing generators they draw from, the gxu device as the
// backing device (`device_object`), lists and tuples element by element; anything else as
// it is.
py::object to_backing(const py::handle& value, const c10::Device& on,
                      const py::handle& device_object) {
  PyObject* object = value.ptr();
  if (THPVariable_Check(object)) {
    const at::Tensor& tensor = THPVariable_Unpack(object);
    if (tensor.device().type() != c10::DeviceType::PrivateUse1) {
      return py::reinterpret_borrow<py::object>(value);
    }
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(alias(tensor, on)));
  }
  if (PyList_CheckExact(object) || PyTuple_CheckExact(object)) {
    const bool is_list = PyList_CheckExact(object);
    const Py_ssize_t size = is_list ? PyList_GET_SIZE(object) : PyTuple_GET_SIZE(object);
    py::list mapped(size);
    for (Py_ssize_t i = 0; i < size; ++i) {
      PyObject* item = is_list ? PyList_GET_ITEM(object, i) : PyTuple_GET_ITEM(object, i);
      mapped[i] = to_backing(item, on, device_object);
    }
    return is_list ? py::object(mapped) : py::object(py::tuple(mapped));
  }
  if (THPDevice_Check(object) &&
      reinterpret_cast<THPDevice*>(object)->device.type() == c10::DeviceType::PrivateUse1) {
    check_index(reinterpret_cast<THPDevice*>(object)->device.index());
    return py::reinterpret_borrow<py::object>(device_object);
  }
  if (THPStorage_Check(object)) {
    const c10::Storage& storage = THPStorage_Unpack(object);
    if (storage.device_type() == c10::DeviceType::PrivateUse1) {
      return py::reinterpret_steal<py::object>(THPStorage_Wrap(alias_storage(storage, on)));
    }
  }
  if (object != Py_None && THPGenerator_Check(object) == 1) {
    const at::Generator& generator = reinterpret_cast<THPGenerator*>(object)->cdata;
    if (generator.device().type() == c10::DeviceType::PrivateUse1) {
      return py::reinterpret_steal<py::object>(THPGenerator_Wrap(backing_generator(generator)));
    }
  }
  return py::reinterpret_borrow<py::object>(value);
}

// An eager op's arguments for its backing kernel: those at `mapped` ((position, name) pairs,
// by name when passed by keyword) through `to_backing`; a Python number passed for a
// Tensor argument (a name in `tensor_names`) back to the 0-dim tensor the boxed call
// unwrapped.
py::tuple backing_arguments(const py::tuple& args, const py::dict& kwargs, const py::tuple& mapped,
                            const py::frozenset& tensor_names, const c10::Device& on,
                            const py::handle& device_object) {
  py::list backing_args(args.size());
  for (size_t i = 0; i < args.size(); ++i) backing_args[i] = args[i];
  // A copy: py::dict(kwargs) would be the caller's own dict, which the fallback still reads.
  auto backing_kwargs = py::reinterpret_steal<py::dict>(PyDict_Copy(kwargs.ptr()));
  for (const py::handle& entry : mapped) {
    const size_t position = entry[py::int_(0)].cast<size_t>();
    const py::handle name = entry[py::int_(1)];
    if (kwargs.contains(name)) {
      backing_kwargs[name] = to_backing(kwargs[name], on, device_object);
    } else if (position < args.size()) {
      const py::handle value = args[position];
      const bool number = PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()) ||
                          PyFloat_Check(value.ptr()) || PyComplex_Check(value.ptr());
      backing_args[position] = number && tensor_names.contains(name)
          ? py::module_::import("torch").attr("tensor")(value)
          : to_backing(value, on, device_object);
    }
  }
  return py::make_tuple(backing_args, backing_kwargs);
}

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
}  // namespace gxu

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace gxu;
  module.def("register_runtime", &register_runtime,
             "install gxu's allocator, hooks, device guard and profiler stubs (once)");
  module.def("leave", &leave, "backing tensors of a tuple as gxu tensors over their memory");
  module.def("to_backing", &to_backing, "a value as the backing device sees it");
  module.def("backing_arguments", &backing_arguments,
             "an eager op's arguments for its backing kernel");
  module.def("own", &own, "a backing tensor as a gxu tensor over its memory");
  module.def("alias", &alias, "a gxu tensor as a backing-device tensor over its memory");
  module.def("view", &storage_view, "a gxu tensor viewing a gxu storage");
  module.def("allocated", &allocated_bytes, "bytes gxu storages hold");
  module.def("peak", &peak_bytes, "the most bytes gxu storages held since the last reset");
  module.def("reset_peak", [] {
    c10::getDeviceAllocator(c10::DeviceType::PrivateUse1)->resetPeakStats(0);
  });
  module.def("live", &live_blocks, "gxu storages alive");
  module.def("default_generator", [] {
    PyObject* generator = THPGenerator_initDefaultGenerator(default_generator());
    return py::reinterpret_steal<py::object>(generator);
  }, "the default gxu generator (torch.gxu.default_generators[0])");
  module.def("backing_generator", [](const at::Generator& generator) {
    TORCH_CHECK(generator.device().type() == c10::DeviceType::PrivateUse1,
                "backing_generator takes a gxu generator, not one on " + generator.device().str());
    return backing_generator(generator);
  }, "the backing-device generator a gxu generator draws from");
  module.def("launch_key", &launch_key, "what Triton may specialize a kernel on, per argument");
}
