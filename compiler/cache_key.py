"""Inductor config for gxu that enters the FX-graph cache key (torch 2.11 and 2.13).

Inductor caches compiled graphs keyed by torch's own code and config; gxu kernels also
depend on gxusim's code generation. `register_backend_for_device(...,
device_custom_config=...)` adds this module's values to the key, so a change to the
compiler package compiles afresh instead of serving kernels from an older gxusim.
"""
import sys

from torch.utils._config_module import install_config_module


def _compiler_source_hash() -> str:
    import hashlib
    from pathlib import Path
    sources = sorted(Path(__file__).parent.glob("*.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()


compiler_source_hash: str = _compiler_source_hash()

install_config_module(sys.modules[__name__])
