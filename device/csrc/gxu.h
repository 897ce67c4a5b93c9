// What the gxu device's C++ files share: the one gxu device, its backing device, and the
// owning storages that every gxu allocation is (memory.cpp). runtime.cpp builds torch's
// backend interfaces (guard, hooks, generator, profiler) on these; module.cpp binds them.
//
// Checked against torch 2.11 and 2.13.
#pragma once

#include <cstdint>
#include <unordered_map>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

namespace gxu {

// gxu has one device (index 0).
inline const c10::Device device(c10::DeviceType::PrivateUse1, 0);
constexpr int64_t device_count = 1;

// Raises torch's error for a device index other than 0 (or -1, "the current one").
void check_index(c10::DeviceIndex index);

// The device whose memory backs gxu tensors (CPU on the emulator target, a CUDA device on
// the cuda target), fixed by the target on the first allocation (`gxusim.target.freeze`).
const c10::Device& backing_device();
inline bool on_cuda() { return backing_device().is_cuda(); }

// A gxu DataPtr owning `backing` (keeps it alive; counted in the allocation statistics).
c10::DataPtr owning_data_ptr(c10::Storage backing);
// The backing storage a gxu DataPtr owns, or nullptr when it owns none.
const c10::Storage* owned_backing(const c10::DataPtr& data);

// Bytes and storages the allocator holds now, and the peak of bytes since the last reset.
int64_t allocated_bytes();
int64_t peak_bytes();
int64_t live_blocks();

// Gxu tensors over backing memory: `owners` maps each backing storage met so far to the gxu
// storage owning it, so that two tensors over one buffer share one gxu storage. A backing
// alias of gxu memory goes back as a view of the gxu storage it aliases.
using Owners = std::unordered_map<const c10::StorageImpl*, c10::Storage>;
at::Tensor to_gxu(const at::Tensor& tensor, Owners& owners);
at::Tensor own(const at::Tensor& tensor);
// A tensor (or storage) on device `on` over a gxu tensor's memory, keeping it alive.
at::Tensor alias(const at::Tensor& gxu, const c10::Device& on);
c10::Storage alias_storage(const c10::Storage& gxu, const c10::Device& on);
// A gxu tensor viewing a gxu storage with the given dtype and geometry.
at::Tensor storage_view(const at::Storage& storage, c10::ScalarType dtype, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride);

// The allocator every gxu storage comes from (c10::GetAllocator(PrivateUse1)).
c10::Allocator* allocator();
// Host memory that `isPinnedPtr` knows (the emulator's pinned memory; the cuda target
// uses CUDA's pinned allocator instead).
c10::Allocator* host_allocator();
bool is_host_pinned(const void* data);

// The generator a gxu generator draws from: a generator of the backing device.
at::Generator backing_generator(const at::Generator& gxu);
const at::Generator& default_generator();

// Installs the backend interfaces of runtime.cpp (once).
void register_runtime();

}  // namespace gxu
