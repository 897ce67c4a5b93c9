"""The GXU emulator: runs @triton.jit kernels on the CPU (numba) and checks their tiling.

Modules, one job each: `frontend` (Triton AST -> typed block IR), `backend` (IR ->
cached numba code), `runtime` (helpers the generated code calls), `checks` (records ->
findings), `occupancy` (layout, transactions, occupancy, time), `api` (`emulate`,
`run_launch`, `EmulationReport`), `cli` (`gxusim emulate`).
"""
from .api import EmulationError, EmulationReport, emulate, run_launch
from .cli import cli_main
from .frontend import Unsupported

__all__ = ["EmulationError", "EmulationReport", "Unsupported", "cli_main", "emulate", "run_launch"]
