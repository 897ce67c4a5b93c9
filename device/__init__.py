"""The gxu device: a PrivateUse1 backend with real memory on the execution target.

Layering (after PyTorch's torch_openreg): `native` builds and loads the C++ part (`csrc/`:
gxu storages and aliases, the allocator, device guard, hooks, generator and profiler
stubs), `memory` owns allocations and aliasing on top of it, `ops` runs aten ops on them
(`cells` adds the fused recurrent cells a CPU backing device lacks), `module` is `torch.gxu`
and the registration.
"""
from .memory import backing_alias, from_backing, is_gxu, to_backing
from .module import DEVICE_NAME, max_memory_allocated, memory_allocated, register

__all__ = ["DEVICE_NAME", "backing_alias", "from_backing", "is_gxu", "memory_allocated",
           "max_memory_allocated", "register", "to_backing"]
