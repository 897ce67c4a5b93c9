"""Sorts and permutations of the `tl` library: sort, topk, flip, gather, histogram.

Each is built from block operations the emulator already checks and runs, as selections
over one more axis: an element's place in a sorted row is how many elements of its row come
before it (ties in index order, NaN above every number), and output element j takes the
input element whose place (or index) is j. That costs n x n comparisons a row where Triton's
bitonic network costs n log^2 n, which is nothing at the block sizes a kernel sorts.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from . import dtypes as D
from .block_ops import BlockOps
from .ir import Val
from .ops import unwrap
from .tl_library import tl_arange, tl_permute


def _along(builder: BlockOps, n: int, rank: int, axis: int) -> Val:
    """0 .. n-1 along `axis` of a block of `rank` axes (unit size on the others)."""
    return builder.view(tl_arange(builder, 0, n), (1,) * axis + (n,) + (1,) * (rank - axis - 1),
                        (axis,))


def _expand(builder: BlockOps, x: Val, axis: int) -> Val:
    """x with a unit axis inserted at `axis`."""
    rank = len(x.shape) + 1
    shape = x.shape[:axis] + (1,) + x.shape[axis:]
    return builder.view(x, shape, tuple(k if k < axis else k + 1 for k in range(rank - 1)))


def _sum_last(builder: BlockOps, x: Val) -> Val:
    return builder.reduce([x], -1, lambda p, q: builder.binary("add", p, q))[0]


def _pick(builder: BlockOps, x: Val, picks: Val) -> Val:
    """out[..., j] = x[..., picks[..., j]] along the last axis (picks: int32 indices)."""
    n, rank = x.shape[-1], len(picks.shape) + 1
    chosen = builder.compare("==", _expand(builder, picks, rank - 1), _along(builder, n, rank, rank - 1))
    identity = builder.const(-0.0 if D.is_float(x.dtype) else 0, x.dtype)  # x + (-0.0) is x
    return _sum_last(builder, builder.where(chosen, _expand(builder, x, rank - 2), identity))


def _last_axis(builder: BlockOps, x: Val, dim: Any, what: str) -> None:
    dim = len(x.shape) - 1 if unwrap(dim) is None else int(unwrap(dim)) % len(x.shape)
    if dim != len(x.shape) - 1:
        raise builder.fail(f"tl.{what} along axis {dim} (Triton sorts along the last axis only)")
    n = x.shape[-1]
    if n & (n - 1):
        raise builder.fail(f"tl.{what} of a row of {n} (Triton needs a power of two)")


def _places(builder: BlockOps, x: Val, descending: bool) -> Val:
    """Each element's place in its row sorted: elements ordered before it (NaN above every
    number, as torch.sort orders it; ties by index)."""
    rank = len(x.shape) + 1
    mine, other = _expand(builder, x, rank - 1), _expand(builder, x, rank - 2)  # [.., i, 1], [.., 1, j]
    first, second = (other, mine) if not descending else (mine, other)
    before = builder.compare("<", first, second)
    tie = builder.compare("==", mine, other)
    if D.is_float(x.dtype):
        nan_mine, nan_other = builder.compare("!=", mine, mine), builder.compare("!=", other, other)
        nan_first, nan_second = (nan_other, nan_mine) if not descending else (nan_mine, nan_other)
        before = builder.binary("or", before,
                                builder.binary("and", nan_second, builder.binary("xor", nan_first, True)))
        tie = builder.binary("or", tie, builder.binary("and", nan_mine, nan_other))
    n = x.shape[-1]
    earlier = builder.compare("<", _along(builder, n, rank, rank - 1), _along(builder, n, rank, rank - 2))
    counted = builder.binary("or", before, builder.binary("and", tie, earlier))
    return _sum_last(builder, builder.cast(counted, "int32"))


def _sorted(builder: BlockOps, x: Val, descending: bool, k: Optional[int] = None) -> Val:
    """The first k (all) elements of each row in order."""
    places = _places(builder, x, descending)
    n, rank = x.shape[-1], len(x.shape) + 1
    k = n if k is None else k
    at = builder.compare("==", _expand(builder, places, rank - 2), _along(builder, k, rank, rank - 2))
    index = builder.where(at, _along(builder, n, rank, rank - 1), builder.const(0, "int32"))
    return _pick(builder, x, _sum_last(builder, index))  # [.., j, i]: which i lands at j


def tl_sort(builder: BlockOps, x: Any, dim: Any = None, descending: Any = False) -> Val:
    x = builder.as_val(x)
    _last_axis(builder, x, dim, "sort")
    return _sorted(builder, x, bool(unwrap(descending)))


def tl_topk(builder: BlockOps, x: Any, k: Any, dim: Any = None, descending: Any = True) -> Val:
    x = builder.as_val(x)
    _last_axis(builder, x, dim, "topk")
    k = int(unwrap(k))
    if k <= 0 or k & (k - 1) or k > x.shape[-1]:
        raise builder.fail(f"tl.topk with k = {k} (a power of two, at most the row's {x.shape[-1]})")
    return _sorted(builder, x, bool(unwrap(descending)), k)


def _on_last_axis(builder: BlockOps, axis: int, rank: int, f: Callable[..., Val], *blocks: Val) -> Val:
    """f applied with `axis` moved last, the result's axes put back."""
    order = tuple(d for d in range(rank) if d != axis) + (axis,)
    back = tuple(order.index(d) for d in range(rank))
    moved = [tl_permute(builder, b, *order) for b in blocks]
    return tl_permute(builder, f(*moved), *back)


def tl_flip(builder: BlockOps, x: Any, dim: Any = None) -> Val:
    x = builder.as_val(x)
    rank = len(x.shape)
    axis = rank - 1 if unwrap(dim) is None else int(unwrap(dim)) % rank
    n = x.shape[axis]
    if n & (n - 1):
        raise builder.fail(f"tl.flip of an axis of {n} (Triton needs a power of two)")

    def reverse(block: Val) -> Val:
        mirrored = builder.binary("sub", n - 1, tl_arange(builder, 0, n))
        return _pick(builder, block, builder.broadcast_to(mirrored, block.shape))
    return _on_last_axis(builder, axis, rank, reverse, x)


def tl_gather(builder: BlockOps, src: Any, index: Any, axis: Any) -> Val:
    """out[.., j, ..] = src[.., index[.., j, ..], ..] along `axis`; src and index alike on
    every other axis (Triton's rule)."""
    src, index = builder.as_val(src), builder.as_val(index)
    rank, axis = len(src.shape), int(unwrap(axis)) % len(src.shape)
    if len(index.shape) != rank or any(a != b for d, (a, b) in enumerate(zip(src.shape, index.shape))
                                       if d != axis):
        raise builder.fail(f"tl.gather of {src.shape} by an index {index.shape} along axis {axis} "
                           f"(the same shape on every other axis)")
    if not D.is_int(index.dtype):
        raise builder.fail(f"tl.gather with a {index.dtype} index")
    return _on_last_axis(builder, axis, rank,
                         lambda s, i: _pick(builder, s, builder.cast(i, "int32")), src, index)


def tl_histogram(builder: BlockOps, input: Any, num_bins: Any, mask: Any = None) -> Val:
    """Counts of the values 0 .. num_bins - 1 in a 1-D block (int32); values outside the
    bins, and masked elements, count nowhere."""
    x, bins = builder.as_val(input), int(unwrap(num_bins))
    if len(x.shape) != 1 or not D.is_int(x.dtype):
        raise builder.fail(f"tl.histogram of a {x.dtype} block {x.shape} (a 1-D integer block)")
    hit = builder.compare("==", builder.view(x, (1, x.shape[0]), (1,)), _along(builder, bins, 2, 0))
    if unwrap(mask) is not None:
        hit = builder.binary("and", hit, builder.view(builder.to_bool(mask), (1, x.shape[0]), (1,)))
    return _sum_last(builder, builder.cast(hit, "int32"))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    name[3:]: f for name, f in dict(globals()).items() if name.startswith("tl_")
    and name not in ("tl_arange", "tl_permute")}
