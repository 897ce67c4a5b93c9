"""gxusim: run PyTorch models on the GXU accelerator before the silicon exists.

`import gxusim` registers the `gxu` device (PrivateUse1), `torch.gxu`, and the
TorchInductor backend that generates grid-capped GXU kernels. Pipeline stages, one
module each: spec -> device -> compiler (lowering hooks, kernel codegen, heuristics,
launch) -> target (CUDA or emulator) -> report.
"""
from .emulator import EmulationError, EmulationReport, emulate
from .environment import check as _check_environment
from .errors import InputError, exit_if_command
from .findings import Finding, GXULimitError
from .launch import Launch, clear_launches, launches, set_launch_history
from .spec import HardwareSpec, SpecError, current_spec, load_spec, use_spec
from .target import current_target, set_target

from gxusim.device import backing_alias as _backing_alias
from gxusim.device import register as _register_device
from gxusim.emulator.arguments import HOST_VIEWS as _HOST_VIEWS
from gxusim.compiler import Heuristics, use_heuristics
from gxusim.compiler import register as _register_compiler
from gxusim.compiler.inductor_registration import last_generated_code

# A bad GXUSIM_* value ($GXUSIM_SPEC too) fails the import, naming the variable, rather
# than the first compile.
try:
    _check_environment()
    current_spec()
except InputError as _error:
    exit_if_command(_error)
    raise
_register_device()
_register_compiler()
_HOST_VIEWS["gxu"] = _backing_alias  # gxu tensors given to `emulate` run in place

__all__ = [
    "EmulationError", "EmulationReport", "Finding", "GXULimitError", "HardwareSpec", "Heuristics",
    "InputError", "Launch",
    "SpecError", "clear_launches", "current_spec", "current_target", "emulate",
    "last_generated_code", "launches", "load_spec", "set_launch_history", "set_target", "use_heuristics", "use_spec",
]
