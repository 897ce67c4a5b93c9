"""Plugging gxu into Dynamo and TorchInductor through their extension points.

Every use of Dynamo/Inductor registration internals lives here.
Checked against torch 2.11.0 (GPU machine) and 2.13.0 (development machines).

* Dynamo: a `DeviceInterface` for "gxu" (device properties are the active spec, streams
  and synchronisation are the target's), and a backend named "gxu" (Inductor).
* Inductor: `register_backend_for_device("gxu", GXUScheduling, GXUWrapperCodegen)`,
  device-op overrides for the Python wrapper, "gxu" added to `GPU_TYPES` so Inductor
  treats it as a Triton GPU device (alignment, device guards, fusion rules), and
  `Scheduler.create_backend` let through for gxu without a GPU (see `_create_backend`),
  and split scans turned off for gxu (`_scan_num_splits`).

Nothing here changes how cpu or cuda tensors compile: every hook is keyed by device.
"""
from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

import torch
from torch._dynamo import device_interface as dynamo_devices
from torch._inductor import config as inductor_config
from torch._inductor import ir as inductor_ir
from torch._inductor import scheduler as inductor_scheduler
from torch._inductor import utils as inductor_utils
from torch._inductor.codegen import common as inductor_common
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.runtime.hints import DeviceProperties

from gxusim import target
from gxusim.once import once
from gxusim.spec import current_spec, on_spec_change

from . import cache_key
from .inductor_codegen import GXUScheduling

DEVICE = "gxu"
# Extern and fallback kernels whose backing implementations choose their results' layout
# (cuDNN, oneDNN), by the aten op whose gxu layout Inductor traced: the wrapper calls them
# through `graph_runtime.in_traced_layout`.
LAYOUT_CHOOSING_KERNELS = {
    "extern_kernels.convolution": "torch.ops.aten.convolution.default",
    "torch.ops.aten.convolution.default": "torch.ops.aten.convolution.default",
    "torch.ops.aten.convolution_backward.default": "torch.ops.aten.convolution_backward.default",
}


def device_properties(device: object = None) -> types.SimpleNamespace:
    """The active spec under the attribute names Inductor reads from CUDA device properties.

    `multi_processor_count` is the SMs a launch can occupy: no more than the spec's grid cap.
    Inductor splits a reduction in two kernels when it has too few rows to fill the SMs;
    under a 32-program cap 256 rows fill every program, and splitting them for 132 SMs (an
    H200 under GXU limits) cost the row sum 256 x 1M 42% (bench_ceiling, H200)."""
    spec = current_spec()
    major, minor = GXUDeviceInterface.get_compute_capability_tuple()
    return types.SimpleNamespace(
        name=spec.name, type=DEVICE, multi_processor_count=min(spec.sm_count, spec.max_grid),
        max_threads_per_multi_processor=spec.max_warps_per_sm * spec.warp_size,
        regs_per_multiprocessor=spec.regs_per_sm, max_threads_per_block=spec.max_threads_per_block,
        warp_size=spec.warp_size, shared_memory_per_block=spec.program_smem,
        total_memory=target.active().total_memory(), major=major, minor=minor)


class GXUDeviceInterface(dynamo_devices.DeviceInterface):
    class device:
        def __new__(cls, device: object) -> object:
            return torch.gxu.device(device)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.gxu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def get_device_properties(device: object = None) -> types.SimpleNamespace:
            return device_properties(device)

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: object) -> None:
        torch.gxu.set_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return 0

    @staticmethod
    def exchange_device(device: int) -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def get_raw_stream(device_index: int) -> int:
        return get_raw_stream(device_index)

    @staticmethod
    def synchronize(device: object = None) -> None:
        torch.gxu.synchronize()

    @classmethod
    def get_device_properties(cls, device: object = None) -> types.SimpleNamespace:
        return device_properties(device)

    @staticmethod
    def get_compute_capability_tuple() -> tuple[int, int]:
        return target.active().capability()

    @staticmethod
    def get_compute_capability(device: object = None) -> int:
        major, minor = GXUDeviceInterface.get_compute_capability_tuple()
        return major * 10 + minor

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_dtype_supported(dtype: torch.dtype, including_emulation: bool = False) -> bool:
        return target.active().supports_dtype(dtype)

    @staticmethod
    def memory_allocated(device: object = None) -> int:
        return torch.gxu.memory_allocated()

    @staticmethod
    def is_triton_capable(device: object = None) -> bool:
        return True

    @staticmethod
    def raise_if_triton_unavailable(device: object = None) -> None:
        return None


_last_code: list[str] = [""]


def last_generated_code() -> str:
    """Wrapper and kernel source of the latest graph generated for gxu in this process.

    A graph served from Inductor's FX-graph cache is not generated again and so does not
    show here; set `torch._inductor.config.force_disable_caches = True` to see every one."""
    return _last_code[0]


class GXUWrapperCodegen(PythonWrapperCodegen):
    """Inductor's Python wrapper, remembering the code it generates for `last_generated_code`."""

    @staticmethod
    def create(is_subgraph: bool, subgraph_name: str | None, parent_wrapper: object,
               partition_signatures: object = None) -> PythonWrapperCodegen:
        if is_subgraph:
            return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper,
                                               partition_signatures)
        return GXUWrapperCodegen()

    def write_header(self) -> None:
        super().write_header()
        # The graph runs on the backing device (`graph_runtime`): these names replace the
        # stock header's `empty_strided` and `device` for the wrapper's allocations and
        # device arguments.
        self.header.splice("""
            from gxusim.compiler.launcher import RecordedExternKernels, reinterpret_tensor
            from gxusim.compiler.graph_runtime import (compiling_ahead, device, empty_strided, enter_graph,
                                                  gxu_one_device, in_traced_layout)
            from gxusim.compiler.graph_replay import replay_graphs
            extern_kernels = RecordedExternKernels(extern_kernels)
        """)

    def write_args(self, input_names: list[str]) -> None:
        super().write_args(input_names)
        names = ", ".join(input_names) + ("," if len(input_names) == 1 else "")
        self.prefix.writeline("gxu_graph = enter_graph()")
        self.prefix.writeline(f"{names} = gxu_graph.enter(({names}))")

    def generate_return(self, output_refs: list[str]) -> None:
        if not output_refs:
            return super().generate_return(output_refs)
        on_gxu = tuple(_device_type(node) == DEVICE for node in self.get_graph_outputs())
        boundary = "gxu_graph" if self.get_graph_input_names() else "enter_graph()"
        self.wrapper_call.writeline(
            f"return {boundary}.leave(({', '.join(output_refs)}, ), {on_gxu!r})")

    def _generate_extern_kernel_alloc_helper(self, extern_kernel: Any, args: list[str]) -> None:
        kernel = extern_kernel.get_kernel_name()
        op = LAYOUT_CHOOSING_KERNELS.get(kernel)
        if op is None or isinstance(extern_kernel.layout, inductor_ir.NoneLayout):
            return super()._generate_extern_kernel_alloc_helper(extern_kernel, args)
        self.writeline(f"{self.declare}{extern_kernel.get_name()} = in_traced_layout("
                       f"{op}, {kernel}, {', '.join(args)}){self.ending}")

    def generate(self, is_inference: bool):
        self.is_inference = is_inference
        result = super().generate(is_inference)
        code = result[0]
        _last_code[0] = getattr(code, "value", code)
        return result

    def generate_end(self, result: Any) -> None:
        super().generate_end(result)
        # The emulator compiles a graph's kernels in worker processes, ahead of its first
        # call (inside the replay below, which counts the calls it is given).
        from torch._inductor.virtualized import V
        mutated = sorted(V.graph.mutated_inputs)
        result.writeline(f"call = compiling_ahead(call, "
                         f"{f'it mutates its inputs {mutated}' if mutated else None!r})")
        # mode="reduce-overhead": Inductor's CUDA graphs skip gxu graphs, graph_replay serves
        # them (reasons to refuse that are known now go with it).
        if inductor_config.triton.cudagraphs:
            result.writeline(f"call = replay_graphs(call, {self._replay_refusal()!r})")

    def _replay_refusal(self) -> str | None:
        from torch._inductor.virtualized import V
        if not getattr(self, "is_inference", True):
            return "a training graph (the next forward would overwrite what backward reads)"
        if V.graph.mutated_inputs:
            return f"it mutates its inputs {sorted(V.graph.mutated_inputs)}"
        return None


@contextlib.contextmanager
def kernels_loaded_in_this_process() -> Iterator[None]:
    """Within the block Inductor loads the kernels it generates in the calling process, not
    through its pool of compile workers. A gxu kernel is compiled by Triton at its first
    launch (`compiler.launcher`), so for gxu the pool only loads the kernel's source in
    another process and sends it back, to be loaded again here: a tenth of a predict-only
    run's time, and in a worker process holding one CPU, a pool importing torch again."""
    with inductor_config.patch(compile_threads=1):
        yield


def _device_type(node: object) -> str | None:
    """The device type of a graph output (None for a symbolic size returned as a value)."""
    try:
        device = node.get_device()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - outputs without a device (sizes) raise or lack it
        return None
    return getattr(device, "type", None)


def get_raw_stream(device_index: int = 0) -> int:
    """The raw stream gxu kernels are launched on: the current CUDA stream, or 0 (emulator)."""
    return target.active().raw_stream()


def _only_device(device_idx: int) -> None:
    if device_idx != 0:
        raise ValueError(f"gxu has one device (index 0); a graph names gxu device {device_idx}")


class GXUDeviceOpOverrides(inductor_common.DeviceOpOverrides):
    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from gxusim.compiler.inductor_registration import get_raw_stream as {name}"

    # gxu has one device, and a graph names it with index 0: the wrapper's guard switches
    # nothing, so it costs nothing per call (torch.gxu.device(0) cost ~0.5 us a call).
    def set_device(self, device_idx: int) -> str:
        _only_device(device_idx)
        return "pass"

    def synchronize(self) -> str:
        return "torch.gxu.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        _only_device(device_idx)
        return "gxu_one_device"

    def current_stream(self) -> str:
        return "torch.gxu.current_stream()"


_stock_create_backend = inductor_scheduler.Scheduler.create_backend


def _create_backend(self: inductor_scheduler.Scheduler, device: torch.device):
    # Stock create_backend refuses GPU-type devices unless torch.utils._triton.has_triton()
    # finds a cuda/xpu/cpu/mtia device Triton can target; gxu kernels also run on the CPU
    # emulator, where only the triton package is needed. Other devices take the stock path.
    if device.type != DEVICE:
        return _stock_create_backend(self, device)
    from torch.utils._triton import has_triton_package
    if not has_triton_package():
        raise RuntimeError("gxusim: compiling for gxu needs the triton package (pip install triton)")
    inductor_scheduler.V.graph.add_device_info(device)
    return GXUScheduling(self)


_stock_scan_num_splits = inductor_ir.Scan.num_splits.__func__


def _scan_num_splits(cls: type, *args: object, **kwargs: object) -> tuple:
    # A split scan runs one row across several programs that wait on each other's partial
    # sums (a workspace and spin-waits): it needs every program resident and cannot loop
    # over tiles under a capped grid. gxu scans therefore stay whole: one row per tile.
    hint, splits = _stock_scan_num_splits(cls, *args, **kwargs)
    device = kwargs.get("device", args[0] if args else None)
    return (hint, 1) if getattr(device, "type", None) == DEVICE else (hint, splits)


def compile_for_gxu(graph: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Any:
    """The Dynamo backend named "gxu" (`torch.compile(fn, backend="gxu")`, as a backend a
    device registers under its name): TorchInductor, which compiles gxu graphs to GXU kernels."""
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(graph, example_inputs, **kwargs)


@once
def register() -> None:
    """Register gxu with Dynamo and Inductor once per process (idempotent, thread-safe)."""
    dynamo_devices.register_interface_for_device(DEVICE, GXUDeviceInterface)
    if DEVICE not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(compile_for_gxu, name=DEVICE)
    inductor_common.register_backend_for_device(DEVICE, GXUScheduling, GXUWrapperCodegen,
                                               device_custom_config=cache_key)
    # Inductor loads its stock device-op overrides (cuda, cpu, ...) lazily, and on torch
    # 2.11 only while its table is empty: registering gxu first would leave cuda
    # without its overrides (`with pass:` in cuda wrappers). Load the stock ones first.
    inductor_common.get_device_op_overrides("cpu")
    inductor_common.register_device_op_overrides(DEVICE, GXUDeviceOpOverrides())
    inductor_scheduler.Scheduler.create_backend = _create_backend
    inductor_ir.Scan.num_splits = classmethod(_scan_num_splits)
    # get_gpu_type() names "the" GPU (cuda on the GPU machine) for passes such as
    # move_constructors_to_gpu and asserts that only one GPU type is available. It is
    # cached, so evaluating it before gxu joins GPU_TYPES keeps its stock answer.
    inductor_utils.get_gpu_type()
    if DEVICE not in inductor_utils.GPU_TYPES:
        inductor_utils.GPU_TYPES.append(DEVICE)
    # Inductor caches each device's properties for the process (`DeviceProperties.create`),
    # and decides with them, e.g. how many ways to split a reduction (by SM count); gxu's
    # come from the active spec, so a new spec must not be planned with the last one's.
    on_spec_change(lambda spec: DeviceProperties.create.cache_clear())
