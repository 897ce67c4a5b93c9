"""The GXU emulator: runs @triton.jit kernels on the CPU (numba) and checks their tiling.

Modules, one job each, in pipeline order:
- front end: `source` (kernel text, AST, hash), `ir` (the IR types), `ops` (op semantics
  tables and dtype rules), `block_ops` (IR-building primitives), `builder` and
  `expressions` (the AST interpreter -> IR: statements; expressions and calls),
  `tl_library`, `tl_reductions` and `tl_permutations` (the `tl.*` / triton_helpers
  functions the builder runs), `tile_loop` (which loops iterate over tiles);
- back end: `planner` (fusion into groups), `emitter` (numba source), `module_cache`
  (source -> loaded module, disk cache), `runtime` (helpers the generated code calls),
  `tracking` (which programs accessed which elements: recorded in the kernel, merged
  after it), `dtypes` (Triton dtypes in numba);
- a launch: `arguments` (binding, buffers), `specialisation` (compile cache),
  `execution` (records, running the grid), `checks` (records -> findings), `occupancy`
  (layout, transactions, registers, occupancy), `analysis` (records -> report and
  `LaunchFacts`), `report` (`EmulationReport`, `EmulationError`), `api` (`emulate`,
  `run_launch`, `compile_ahead`), `compile_pool` (numba compiles in worker processes),
  `cli` (`gxusim emulate`).
"""
from .api import EmulationError, EmulationReport, compile_ahead, emulate, run_launch
from .cli import cli_main
from .ir import Unsupported

__all__ = ["EmulationError", "EmulationReport", "Unsupported", "cli_main", "compile_ahead", "emulate",
           "run_launch"]
