"""GXU kernel code generation: Inductor's Triton kernels, wrapped in a loop over tiles.

Every use of TorchInductor's kernel-codegen internals lives here.
Checked against torch 2.11.0 (GPU machine) and 2.13.0 (development machines).

Inductor's `TritonKernel` writes one tile per program: offsets come from
`tl.program_id(d)`. `GXUTritonKernel` keeps all of Inductor's lowering, fusion, indexing
and reduction code and changes four things:

* the program id of each grid axis becomes a tile index (`xtile`, `ytile`), via
  `iteration_ranges_get_pid`;
* the body is wrapped in a grid-stride loop over the flattened tile space,
  `for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0))`, so any number of
  programs from 1 to `n_tiles` computes the whole output (the launcher picks it);
* a looped reduction's chunk loop gets `num_stages=NUM_STAGES`, a constexpr the launch
  plan sets: Triton software-pipelines the loads of a loop only when the loop names its
  stages (loops without a `tl.dot` are otherwise never pipelined), and under a capped grid
  each program must keep several chunks in flight to stream (`pipelined_chunk_loops`);
* the kernel module imports `gxusim.compiler.launcher` as its `triton_heuristics`, so
  launches go through GXU heuristics and spec checks instead of Inductor's autotuner;
* the largest block Inductor assumes when it drops masks is the plan's limit
  (`MAX_BLOCK_ELEMENTS`), not its own 4096: gxu tiles are larger;
* each load, store, reduction and scan Inductor emits is recorded as the kernel's
  `gxusim.traits.KernelTraits`, which travel in its `inductor_meta` as `gxu_traits`.

Kernel kinds that address programs themselves (cooperative and mix-order reductions,
split scans, combo kernels) are refused with a clear error rather than launched uncapped.
"""
from __future__ import annotations

import hashlib
import re
from unittest import mock

import torch
import triton
from torch._inductor.codegen.common import BackendFeature, IndentedBuffer
from torch.utils._ordered_set import OrderedSet
from torch._inductor.codegen.triton import TritonKernel, TritonScheduling

from torch._inductor.utils import Placeholder
from torch._inductor.virtualized import V

from gxusim import target
from gxusim.model.kernel_work import kernel_work, live_values
from gxusim.traits import Access, KernelTraits, dtype_name

from .plan import MAX_BLOCK_ELEMENTS, PIPELINE_PARAM

TILE_INDEX = {0: "xtile", 1: "ytile"}  # grid axis -> tile index variable in the kernel body
_CHUNK_LOOP = re.compile(r"(for r0_offset in tl\.range\(0, r0_numel, R0_BLOCK)\):")
_BLOCK_SIGNATURE = re.compile(r"(\ndef [\w.]+\(.*R0_BLOCK : tl\.constexpr)\):")


def pipelined_chunk_loops(code: str) -> str:
    """`code` with every looped-reduction chunk loop pipelined `NUM_STAGES` deep, and that
    constexpr added to the kernel's parameters (unchanged without a chunk loop).

    Triton's pipeliner overlaps a loop's loads with the iterations before them (async
    copies into shared memory, NUM_STAGES - 1 chunks ahead) only for loops that carry a
    `num_stages`, or whose loads feed a `tl.dot`. A capped row sum on the H200 (32768 x
    4096 fp32, 32 programs, 16 warps) streamed at 0.6-2.7 TB/s by config without it, erratic
    from one config to its neighbour, and at 2.0-3.2 TB/s with 3-4 stages, rising smoothly
    with the tile (docs/gpu-measurements.md)."""
    code, loops = _CHUNK_LOOP.subn(rf"\1, num_stages={PIPELINE_PARAM}):", code)
    if not loops:
        return code
    code, signatures = _BLOCK_SIGNATURE.subn(rf"\1, {PIPELINE_PARAM} : tl.constexpr):", code)
    if signatures != 1:
        raise RuntimeError("gxusim: Inductor's looped-reduction kernel signature changed (no "
                           "`R0_BLOCK : tl.constexpr` last); update "
                           "gxusim/compiler/inductor_codegen.py for this torch version")
    return code


class GXUTritonKernel(TritonKernel):

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # What the kernel does, as Inductor emits it: each (buffer, index) once.
        self._loads: dict[tuple[str, str], Access] = {}
        self._stores: dict[tuple[str, str], Access] = {}
        self._reductions: list[str] = []
        self._scans = 0

    def _access(self, buffer: str, name: str, index) -> Access:
        dtype = V.graph.get_dtype(name)
        strides = self.get_strides_of_load(index)
        return Access(buffer, dtype_name(dtype), dtype.itemsize,
                      contiguous=any(stride == 1 for stride in strides.values()),
                      broadcast=bool(self.is_broadcasted(index)),
                      indirect=bool(self.is_indirect_indexing(index)),
                      along_reduction=any(str(s).startswith("r") for s in index.free_symbols),
                      reversed=any(stride == -1 for stride in strides.values()))

    def load(self, name: str, index):
        value = super().load(name, index)
        self._loads.setdefault((name, str(index)), self._access(self.args.input(name), name, index))
        return value

    def store(self, name: str, index, *args, **kwargs):
        self._stores.setdefault((name, str(index)),
                                self._access(self.args.output(name), name, index))
        return super().store(name, index, *args, **kwargs)

    def store_reduction(self, name: str, index, value):
        self._stores.setdefault((name, str(index)),
                                self._access(self.args.output(name), name, index))
        return super().store_reduction(name, index, value)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        self._reductions.append(str(reduction_type))
        return super().reduction(dtype, src_dtype, reduction_type, value)

    def scan(self, *args, **kwargs):
        self._scans += 1
        return super().scan(*args, **kwargs)

    def traits(self, code: str) -> KernelTraits:
        """The kernel's traits: the accesses, reductions and scans recorded while Inductor
        wrote it, and the finished `code`'s counts per element."""
        for placeholder in (Placeholder.KERNEL_NAME, Placeholder.DESCRIPTIVE_NAME):
            code = code.replace(str(placeholder), "kernel")  # not yet named: valid Python
        work = kernel_work(code)
        return KernelTraits(tuple(self._loads.values()), tuple(self._stores.values()),
                            tuple(self._reductions), self._scans,
                            code.count("for r0_offset in tl.range(0, r0_numel, R0_BLOCK"),
                            work.flops, work.transcendentals, live_values(code),
                            work.random_numbers)

    @classmethod
    def gen_common_triton_imports(cls) -> str:
        imports = super().gen_common_triton_imports()
        stock = "from torch._inductor.runtime import triton_helpers, triton_heuristics"
        if stock not in imports:
            raise RuntimeError("gxusim: Inductor's kernel imports changed; update "
                               "gxusim/compiler/inductor_codegen.py for this torch version")
        return imports.replace(stock, "from torch._inductor.runtime import triton_helpers\n"
                                      "from gxusim.compiler import launcher as triton_heuristics")

    @classmethod
    def inductor_meta_common(cls) -> dict:
        if target.active().has_triton_driver:
            return super().inductor_meta_common()
        # Stock code hashes the active Triton driver's target into the metadata; without a
        # GPU there is no driver, and the emulator runs Triton source, so hash that instead.
        emulator_hash = hashlib.sha256(f"gxu-emulator-triton-{triton.__version__}".encode())
        with mock.patch.object(torch.utils._triton, "triton_hash_with_backend",
                               lambda: emulator_hash.hexdigest()):
            return super().inductor_meta_common()

    def max_block(self, prefix: str) -> int:
        # Inductor drops a tree's mask where its size is a multiple of the largest block it
        # would launch (4096 along x), and shapes block pointers by that block; a gxu plan
        # may choose any power of two up to the plan's limit, so every such assumption is
        # made for that limit (else a 32768-element tile over 4096 x 65 elements runs past
        # the buffers).
        return MAX_BLOCK_ELEMENTS

    def iteration_ranges_get_pid(self, entry) -> str:
        if entry.grid_dim not in TILE_INDEX:
            raise NotImplementedError(f"gxusim: a {entry.grid_dim + 1}-axis tile grid "
                                      f"(range tree {entry.prefix}) is not supported on gxu")
        tile = TILE_INDEX[entry.grid_dim]
        return f"{tile}.to({self.index_dtype})" if self.index_dtype != "tl.int32" else tile

    def needs_yz_grid_overflow(self, entry) -> bool:
        return False  # tiles are flattened into one loop: no grid axis can overflow

    def _grid_trees(self) -> list:
        return sorted((t for t in self.range_trees if t.grid_dim is not None and not t.is_reduction),
                      key=lambda t: t.grid_dim)

    def _tile_loop(self) -> list[str]:
        """Lines opening the loop over tiles (the body goes inside, one level deeper)."""
        trees = self._grid_trees()
        first = "tl.program_id(0)"
        if len(trees) == 1:
            tree = trees[0]
            count = f"tl.cdiv({tree.prefix}numel, {tree.prefix.upper()}BLOCK)"
            return [f"for {TILE_INDEX[0]} in range({first}, {count}, tl.num_programs(0)):"]
        return ["x_tiles = tl.cdiv(xnumel, XBLOCK)",
                "n_tiles = x_tiles * tl.cdiv(ynumel, YBLOCK)",
                f"for tile in range({first}, n_tiles, tl.num_programs(0)):",
                f"    {TILE_INDEX[0]} = tile % x_tiles",
                f"    {TILE_INDEX[1]} = tile // x_tiles"]

    def codegen_static_numels(self, code: IndentedBuffer) -> None:
        # codegen_kernel calls this once, just before splicing self.body into the kernel
        # function: the last moment the complete body exists, so it is wrapped here.
        super().codegen_static_numels(code)
        body, self.body = self.body, IndentedBuffer()
        lines = self._tile_loop()
        for line in lines:
            self.body.writeline(line)
        with self.body.indent():
            self.body.splice(body)

    def codegen_kernel(self, name=None) -> str:
        for feature in ("cooperative_reduction", "mix_order_reduction"):
            if getattr(self, feature, False):
                raise NotImplementedError(
                    f"gxusim: Inductor chose a {feature.replace('_', ' ')} kernel for gxu; it "
                    f"assigns work by program id and cannot be capped at the spec's grid")
        code = pipelined_chunk_loops(super().codegen_kernel(name))
        if not target.active().has_triton_driver:
            # The kernel module selects Triton's GPU driver on import; the emulator needs none.
            code = code.replace("triton_helpers.set_driver_to_gpu()\n", "")
        if code.count("tl.program_id(") != 1:
            raise NotImplementedError(
                "gxusim: generated kernel addresses programs outside the tile loop; refusing to "
                "launch it on gxu:\n" + code)
        return code


class GXUScheduling(TritonScheduling):
    kernel_type = GXUTritonKernel
    # Features whose kernels gxu cannot cap, so Inductor lowers them some other way:
    # FOREACH (combo kernels, e.g. a cat of inputs: each sub-kernel picks its own program
    # ids), TRITON_TEMPLATES (mm/conv templates: extern calls instead), SORT (tl.sort,
    # which the emulator does not run: aten's sort on the backing device instead).
    UNCAPPABLE = OrderedSet([BackendFeature.FOREACH, BackendFeature.TRITON_TEMPLATES,
                             BackendFeature.SORT])

    @classmethod
    def get_backend_features(cls, device: torch.device) -> OrderedSet:
        return OrderedSet(f for f in super().get_backend_features(device)
                          if f not in cls.UNCAPPABLE)

    @classmethod
    def get_tiling_and_scores(cls, node_schedule, numel, reduction_numel=1,
                              coalesce_analysis=None):
        # The tile loop decomposes tiles over at most len(TILE_INDEX) grid axes, while
        # Inductor's coalescing analysis may pick three for a pointwise kernel (its
        # `max_tiles` defaults to 3 there): capping it makes Inductor choose its best tiling
        # among those gxu can loop over. It may also tile a reduction over two grid axes (x
        # and y) or two reduction axes (torch 2.13 does for a permuted input); gxu plans
        # reductions over rows of one x axis, so such a kernel keeps the default reduction tiling.
        max_tiles = min(torch._inductor.config.triton.max_tiles or len(TILE_INDEX), len(TILE_INDEX))
        with torch._inductor.config.patch({"triton.max_tiles": max_tiles}):
            tiling, scores = super().get_tiling_and_scores(node_schedule, numel, reduction_numel,
                                                           coalesce_analysis)
        if reduction_numel != 1 and set(tiling) - {"x", "r0_"}:
            return cls.create_tiling([numel], [reduction_numel]), None
        return tiling, scores

    def create_kernel_choices(self, kernel_features, kernel_args, kernel_kwargs):
        # Cooperative reductions split rows across programs that synchronise: no tile loop.
        kernel_kwargs["override_cooperative_reduction"] = False
        kernels = super().create_kernel_choices(kernel_features, kernel_args, kernel_kwargs)
        for kernel in kernels:
            if not isinstance(kernel, GXUTritonKernel):
                raise NotImplementedError(
                    f"gxusim: Inductor chose a {type(kernel).__name__} for gxu (e.g. a split "
                    f"scan); it picks its own program ids and cannot be capped at the spec's grid")
        return kernels

    def define_kernel(self, src_code: str, node_schedule, kernel) -> str:
        # The aten ops fused into this kernel travel in its inductor_meta, so the launcher
        # can log the fusion decision ("[Fusion] kernel <- aten.add + aten.relu") at run time,
        # and so do its traits, for the policies that plan its launches.
        operators = fused_aten_operators(node_schedule)
        traits = kernel.traits(src_code).as_dict() if isinstance(kernel, GXUTritonKernel) else {}
        src_code = src_code.replace("inductor_meta={", f"inductor_meta={{'original_aten': "
                                    f"{operators!r}, 'gxu_traits': {traits!r}, ", 1)
        return super().define_kernel(src_code, node_schedule, kernel)


def fused_aten_operators(node_schedule) -> list[str]:
    """The aten operators (e.g. "aten.add") whose FX nodes a kernel's schedule came from,
    in graph order, each once."""
    from torch._inductor.utils import aggregate_origins
    origins = [o for o in aggregate_origins(node_schedule) if o.op == "call_function"]
    order = {node: index for index, node in enumerate(origins[0].graph.nodes)} if origins else {}
    names = []
    for origin in sorted(origins, key=lambda node: order.get(node, 0)):
        aten = origin.meta.get("original_aten")
        name = str(getattr(aten, "_overloadpacket", aten or origin.target))
        if name not in names:
            names.append(name)
    return names
