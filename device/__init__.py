"""The gxu device: a PrivateUse1 backend with real memory on the execution target.

Layering (after PyTorch's torch_openreg): `native` (C++) makes gxu storages and aliases,
`memory` owns allocations and aliasing on top of it,
`ops` runs aten ops on them, `module` is `torch.gxu` and the registration.
"""
from .memory import (backing_alias, from_backing, is_gxu, max_memory_allocated, memory_allocated,
                     to_backing)
from .module import DEVICE_NAME, register

__all__ = ["DEVICE_NAME", "backing_alias", "from_backing", "is_gxu", "memory_allocated",
           "max_memory_allocated", "register", "to_backing"]
