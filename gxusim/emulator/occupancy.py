"""Grid and warp model: which thread holds which block element, memory transactions,
occupancy and a first performance estimate.

Layout. A program of `num_warps` warps of `warp_size` lanes holds a block in Triton's
blocked layout: `size_per_thread` contiguous elements along the fastest dimension
(as many as fit 16 bytes, fewer when the block has fewer elements than threads x 4),
`threads_per_warp` filled from the fastest dimension outwards, `warps_per_cta` likewise
with leftover warps on the slowest dimension. Element coordinate c along dim d sits in
vector slot c % spt, lane (c // spt) % tpw, warp (c // (spt tpw)) % wpc and repetition
c // (spt tpw wpc). When the block is smaller than the program's threads the layout
wraps, and the surplus lanes hold copies: they are idle.

Transactions. One warp instruction moves the elements of one (warp, repetition); the
memory system serves it in 32-byte sectors. Coalescing efficiency of an access site =
useful bytes / (sectors x 32), measured on the site's first execution in program 0
with the real offsets and masks.

Occupancy. Resident programs per SM = min(max_blocks_per_sm, max_warps_per_sm //
num_warps, regs_per_sm // (regs_per_thread x threads), smem_per_sm // smem_per_block);
the limiter is the first term attaining the minimum. Registers per thread are estimated
from the kernel's peak live block values (elements per thread x 32-bit words live at
once + 16 for addresses and scalars, clamped to max_regs_per_thread) unless a compiled
kernel's `n_regs` is given. Waves = ceil(programs / (blocks_per_sm x sm_count)).

Resources. `live_words` and `smem_bytes` read the planned kernel (its fused groups and
reductions) for the register and shared-memory estimates above.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Optional

import numpy as np
from numba import njit

from ..model.residency import residency
from ..spec import HardwareSpec
from . import dtypes as D
from .ir import Reduce, Val, walk
from .planner import Group, base_reads, operands

REGISTER_OVERHEAD = 16


@dataclasses.dataclass(frozen=True)
class BlockedLayout:
    size_per_thread: tuple
    threads_per_warp: tuple
    warps_per_cta: tuple
    order: tuple  # fastest dimension first


@dataclasses.dataclass
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    limiter: str
    regs_per_thread: int
    smem_per_block: int
    threads_per_block: int
    waves: int
    idle_lane_fraction: float

    def __str__(self) -> str:
        return (f"{self.blocks_per_sm} blocks/SM ({self.warps_per_sm} warps/SM, limited by "
                f"{self.limiter}), {self.regs_per_thread} regs/thread, {self.waves} wave(s)")


def blocked_layout(shape: tuple, num_warps: int, warp_size: int, elem_bytes: int,
                   vector_bytes: int = 16) -> BlockedLayout:
    """Triton's default blocked layout of a block: each thread a vector of the fastest
    dimension (`vector_bytes` wide), then lanes and warps along the dimensions in order."""
    rank = len(shape)
    order = tuple(reversed(range(rank)))
    threads = num_warps * warp_size
    numel = math.prod(shape)
    spt = [1] * rank
    fastest = order[0]
    spt[fastest] = max(1, min(vector_bytes // max(1, elem_bytes), numel // threads,
                              shape[fastest]))
    tpw, wpc = [1] * rank, [1] * rank
    lanes, warps = warp_size, num_warps
    for d in order:
        tpw[d] = max(1, min(lanes, shape[d] // spt[d]))
        lanes //= tpw[d]
    tpw[order[-1]] *= lanes  # wrap the rest on the slowest dimension
    for d in order:
        wpc[d] = max(1, min(warps, shape[d] // (spt[d] * tpw[d])))
        warps //= wpc[d]
    wpc[order[-1]] *= warps
    return BlockedLayout(tuple(spt), tuple(tpw), tuple(wpc), order)


def idle_lane_fraction(shape: tuple, num_warps: int, warp_size: int) -> float:
    threads = num_warps * warp_size
    return max(0.0, 1.0 - math.prod(shape) / threads) if shape else 1.0 - 1.0 / threads


# Memo of `sector_efficiency`: sweeps launch the same kernels with the same tiling again and
# again, and counting sectors costs more than the rest of a launch's analysis.
_EFFICIENCY_MEMO: dict = {}
EFFICIENCY_MEMO_ENTRIES = 4096


def sector_efficiency(offsets: np.ndarray, mask: np.ndarray, shape: tuple, base_elem: int,
                      elem_bytes: int, num_warps: int, spec: HardwareSpec) -> float:
    """Useful bytes / sector bytes of one block access, from its element offsets and mask,
    in the spec's sectors and layout (memoised on their contents and the layout parameters)."""
    units = (spec.warp_size, spec.vector_bytes, spec.sector_bytes)
    key = (_contents_key(offsets, mask), shape, base_elem, elem_bytes, num_warps, units)
    eff = _EFFICIENCY_MEMO.get(key)
    if eff is None:
        if len(_EFFICIENCY_MEMO) >= EFFICIENCY_MEMO_ENTRIES:
            _EFFICIENCY_MEMO.clear()  # bounded; clear() is safe under concurrent launches
        eff = _EFFICIENCY_MEMO[key] = _count_sector_efficiency(offsets, mask, shape, base_elem,
                                                               elem_bytes, num_warps, *units)
    return eff


@njit(cache=True, nogil=True)
def _progression(offsets: np.ndarray, mask: np.ndarray) -> tuple:
    """(True, first, step) where every lane is active and the offsets step evenly (a tile of
    a contiguous or strided row: most accesses), else (False, 0, 0)."""
    n = offsets.shape[0]
    if n == 0:
        return False, 0, 0
    first = offsets[0]
    step = offsets[1] - first if n > 1 else 0
    even = True
    for i in range(n):
        even &= mask[i] & (offsets[i] == first + i * step)
    return even, first, step


def _contents_key(offsets: np.ndarray, mask: np.ndarray) -> tuple:
    """The sample's offsets and mask as a memo key: (first, step, lanes) for an even
    progression of active lanes, found in one vectorised pass; else a digest of both
    arrays (hashing 32K offsets costs a quarter of a millisecond, most of a launch's
    analysis)."""
    even, first, step = _progression(offsets, mask)
    if even:
        return ("progression", int(first), int(step), offsets.shape[0])
    digest = hashlib.blake2b(np.ascontiguousarray(offsets), digest_size=16)
    digest.update(np.ascontiguousarray(mask))
    return ("digest", digest.digest(), offsets.dtype.str, mask.dtype.str)


def _count_sector_efficiency(offsets: np.ndarray, mask: np.ndarray, shape: tuple, base_elem: int,
                             elem_bytes: int, num_warps: int, warp_size: int, vector_bytes: int,
                             sector_bytes: int) -> float:
    if not shape or not mask.any():
        return 1.0
    layout = blocked_layout(shape, num_warps, warp_size, elem_bytes, vector_bytes)
    coords = np.unravel_index(np.arange(math.prod(shape)), shape)
    warp = np.zeros(len(coords[0]), np.int64)
    rep = np.zeros(len(coords[0]), np.int64)
    for d, c in enumerate(coords):
        spt, tpw, wpc = layout.size_per_thread[d], layout.threads_per_warp[d], layout.warps_per_cta[d]
        warp = warp * wpc + (c // (spt * tpw)) % wpc
        rep = rep * max(1, -(-shape[d] // (spt * tpw * wpc))) + c // (spt * tpw * wpc)
    active = mask.astype(bool)
    instr = (warp * (rep.max() + 1) + rep)[active]
    sector = ((offsets[active] + base_elem) * elem_bytes) // sector_bytes
    sector -= sector.min()
    # distinct elements (replicated lanes read the same address once)
    unique_elems = len(np.unique(offsets[active]))
    sectors = len(np.unique(instr * (int(sector.max()) + 1) + sector))
    return min(1.0, unique_elems * elem_bytes / (sectors * sector_bytes))


def estimate_registers(live_words: list[tuple[int, int]], num_warps: int, spec: HardwareSpec,
                       n_regs: Optional[int] = None) -> int:
    """live_words: (block elements, 32-bit words live per element) per fused loop."""
    if n_regs is not None:
        return int(n_regs)
    threads = num_warps * spec.warp_size
    peak = max((math.ceil(numel / threads) * words for numel, words in live_words), default=0)
    # The register allocator keeps one block of `threads` resident (it spills the rest), so
    # registers alone never make a launch impossible; shared memory can.
    return min(spec.max_regs_per_thread, spec.regs_per_sm // threads, peak + REGISTER_OVERHEAD)


def occupancy(spec: HardwareSpec, num_warps: int, programs: int, regs_per_thread: int,
              smem_per_block: int, block_shape: tuple) -> Occupancy:
    threads = num_warps * spec.warp_size
    blocks, limiter = residency(spec, num_warps, max(1, regs_per_thread), smem_per_block)
    waves = math.ceil(programs / max(1, blocks * spec.sm_count)) if blocks else 0
    return Occupancy(blocks, blocks * num_warps, limiter, regs_per_thread, smem_per_block, threads,
                     waves, idle_lane_fraction(block_shape, num_warps, spec.warp_size))


def live_words(units: list) -> list[tuple[int, int]]:
    """(block elements, 32-bit words of the block values it touches) per fused loop."""
    out = []
    for g in walk(units):
        if isinstance(g, Group) and g.shape:
            vals = {}
            for s in g.items:
                if isinstance(s, Val):
                    vals[s.id] = s
                for op in operands(s):
                    for b, _ in base_reads(op):
                        if b.shape and b.op not in ("const", "arange"):
                            vals[b.id] = b
            words = sum(2 if D.bits(v.dtype) > 32 else 1 for v in vals.values())
            out.append((math.prod(g.shape), words))
    return out


def smem_bytes(units: list, num_warps: int) -> int:
    """Cross-warp scratch: one 32-bit word per warp for each reduced row (a reduction's
    output element, or a scan's row: a scan exchanges one partial per warp and row)."""
    def rows(r: Reduce, output: Val) -> int:
        shape = r.inputs[0].shape
        return math.prod(s for d, s in enumerate(shape) if d not in r.axes) if r.scan \
            else math.prod(output.shape)
    return max((rows(r, o) * num_warps * 4 for r in walk(units)
                if isinstance(r, Reduce) for o in r.outputs), default=0)

