"""Launch compiled Triton kernels without the JIT's per-call Python dispatch (cuda target).

`kernel[grid](*args, **options)` re-binds the arguments, recomputes the specialization key
and walks Triton's caches on every call: tens of microseconds of Python per launch, which
for mid-size kernels is more than the kernel. Like Inductor's own launchers, a
`BinaryLauncher` compiles through the JIT once per argument specialization and from then on
calls the compiled binary's `run` directly; the specialization key of a launch's arguments
is computed in C++ (`gxusim.device.native.launch_key`: 0.4 us against 2.6 in Python).

Triton internals used, checked against Triton 3.6 (GPU machine) and 3.9 (development
machines): since 3.3, `CompiledKernel.run(grid_0, grid_1, grid_2, stream, function,
packed_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, *bound_args)` with
every parameter of the kernel, constexprs included, in signature order;
`triton.knobs.runtime.launch_enter_hook` / `launch_exit_hook` (profilers); and
`CompiledKernel._init_handles()`, which loads the binary and sets `n_regs` and `n_spills`
(local memory bytes / 4) from the loaded function; `CompiledKernel.metadata.shared` (bytes);
`CompiledKernel.asm["cubin"]` (the binary's bytes, which `gxusim.model.machine_code` disassembles).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import triton

from .model.machine_code import MachineCode, cubin_readings


def _hooked(hook: Any) -> bool:
    """Whether a launch hook is installed (a function on 3.6; a chain, maybe empty, on 3.9)."""
    return hook is not None and bool(getattr(hook, "calls", True))


class BinaryLauncher:
    """One kernel at one set of launch options: compiled binaries by argument specialization."""

    def __init__(self, fn: Any, runtime_args: Sequence[str], options: dict[str, Any]) -> None:
        from gxusim.device.native import native  # the device package imports this module's users
        self.key = native.launch_key  # what Triton may specialize on, or finer, per argument
        self.fn = fn
        self.options = options
        self.binaries: dict[tuple, Any] = {}
        # The values of the parameters that are not runtime arguments, in signature order.
        runtime = set(runtime_args)
        self.trailing = []
        for param in fn.params:
            if param.name in runtime:
                continue
            if param.name in options:
                self.trailing.append(options[param.name])
            elif param.has_default:
                self.trailing.append(param.default)
            else:
                raise TypeError(f"kernel {fn.__name__}: no value for parameter {param.name!r}")
        if [p.name for p in fn.params][:len(runtime_args)] != list(runtime_args):
            raise TypeError(f"kernel {fn.__name__}: runtime arguments must come first")

    def __call__(self, grid: tuple[int, int, int], args: Sequence[Any], stream: int) -> Any:
        """Launch; returns the compiled binary that ran (its `n_regs`, `n_spills`)."""
        key = self.key(args)
        binary = self.binaries.get(key)
        if binary is None or _hooked(triton.knobs.runtime.launch_enter_hook) or \
                _hooked(triton.knobs.runtime.launch_exit_hook):
            # First call of this specialization (compile, launch, keep the binary), or a
            # profiler hook that wants the JIT's launch metadata.
            binary = self.binaries[key] = self.fn[grid](*args, **self.options)
            return binary
        binary.run(grid[0], grid[1], grid[2], stream, binary.function, binary.packed_metadata,
                   None, None, None, *args, *self.trailing)
        return binary


class Resources(NamedTuple):
    """What a compiled binary says about itself, as the performance model asks it."""
    spills: int  # ptxas's spilled 4-byte words per thread (local memory)
    regs_per_thread: int
    smem_per_block: int  # bytes of shared memory a program takes
    code: Optional[MachineCode] = None  # its loops' memory waits (None: not disassembled)


def resources(binary: Any) -> Resources:
    """The resources of a compiled binary that has been loaded (launched once, or
    `_init_handles()`), with its machine code's loops."""
    return Resources(binary.n_spills, binary.n_regs, binary.metadata.shared,
                     _machine_code(binary))


def _machine_code(binary: Any) -> Optional[MachineCode]:
    cubin = binary.asm.get("cubin") if hasattr(binary, "asm") else None
    return cubin_readings(cubin, machine_code=True)[1] if cubin else None


def cross_compiled_resources(fn: Any, signature: dict[str, str], attrs: dict,
                             constants: dict[str, Any], options: dict[str, Any],
                             capability: int, machine_code: bool = False) -> Optional[Resources]:
    """The resources of the binary `fn` compiles to for an NVIDIA GPU of compute
    `capability` (90: sm_90), compiled on this machine by Triton and its bundled ptxas,
    no GPU needed; None where cuobjdump cannot read them. `signature` and `attrs` as
    Inductor's `triton_meta` gives them ("signature", "configs"[0]); `constants` the
    constexpr values (block sizes, and any constexpr the signature lacks, such as GXU code
    generation's NUM_STAGES). With `machine_code`, its loops too (disassembled here), as the
    cuda target reads them off the binary it launches."""
    from triton.backends.compiler import GPUTarget
    signature = {**signature, **{name: "constexpr" for name in constants if name not in signature}}
    source = triton.compiler.ASTSource(fn, signature, dict(constants), attrs)
    binary = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
    usage, code = cubin_readings(binary.asm["cubin"], machine_code)
    if usage is None:
        return None
    registers, frame_bytes, _ = usage
    return Resources(frame_bytes // 4, registers, binary.metadata.shared, code)


def compiled_resources(fn: Any, grid: tuple[int, int, int], args: Sequence[Any],
                       options: dict[str, Any]) -> Resources:
    """The resources of the binary these arguments and launch options compile to: compiled
    (or found in Triton's cache) and loaded, not launched."""
    binary = fn.warmup(*args, grid=grid, **options)
    binary._init_handles()
    return resources(binary)
