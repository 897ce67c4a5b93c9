"""Reductions and scans of the `tl` library, and Inductor's `triton_helpers` that the
builder runs natively instead of inlining them.

Every one becomes a `Reduce` statement (`BlockOps.reduce`) with its combine body; argmax
and argmin carry (value, index) pairs. `FUNCTIONS` maps `tl` names, `HELPERS` helper names.
"""
from __future__ import annotations

from typing import Any, Callable

from triton.runtime.jit import JITFunction

from . import dtypes as D
from .block_ops import BlockOps
from .ir import Val
from .ops import dtype_name, sum_dtype, unwrap


def _combine_fn(builder: BlockOps, combine_fn: Any, what: str) -> Callable[..., Any]:
    fn = unwrap(combine_fn)
    if not isinstance(fn, JITFunction):
        raise builder.fail(f"{what} combine_fn that is not a @triton.jit function")
    return lambda *params: builder.inline(fn, list(params), {})


def tl_associative_scan(builder: BlockOps, input: Any, axis: Any, combine_fn: Any,
                        reverse: bool = False) -> Any:
    inputs = list(input) if isinstance(input, (tuple, list)) else [input]
    combine = _combine_fn(builder, combine_fn, "tl.associative_scan")
    out = builder.reduce(inputs, axis, combine, scan=True, reverse=reverse)
    return tuple(out) if isinstance(input, (tuple, list)) else out[0]


def tl_cumsum(builder: BlockOps, x: Any, axis: Any = 0, reverse: bool = False, dtype: Any = None) -> Val:
    x = builder.as_val(x)
    dt = dtype_name(dtype) if unwrap(dtype) is not None else sum_dtype(x.dtype)
    return builder.reduce([builder.cast(x, dt)], axis, lambda p, q: builder.binary("add", p, q),
                          scan=True, reverse=reverse)[0]


def tl_cumprod(builder: BlockOps, x: Any, axis: Any = 0, reverse: bool = False) -> Val:
    x = builder.as_val(x)
    return builder.reduce([builder.cast(x, sum_dtype(x.dtype))], axis,
                          lambda p, q: builder.binary("mul", p, q), scan=True, reverse=reverse)[0]


def tl_reduce(builder: BlockOps, input: Any, axis: Any, combine_fn: Any, keep_dims: bool = False) -> Any:
    inputs = list(input) if isinstance(input, (tuple, list)) else [input]
    out = builder.reduce(inputs, axis, _combine_fn(builder, combine_fn, "tl.reduce"), keep_dims)
    return tuple(out) if isinstance(input, (tuple, list)) else out[0]


def tl_sum(builder: BlockOps, x: Any, axis: Any = None, keep_dims: bool = False,
           dtype: Any = None) -> Val:
    x = builder.as_val(x)
    dt = dtype_name(dtype) if unwrap(dtype) is not None else sum_dtype(x.dtype)
    return builder.reduce([builder.cast(x, dt)], axis, lambda p, q: builder.binary("add", p, q),
                          keep_dims)[0]


def tl_xor_sum(builder: BlockOps, x: Any, axis: Any = None, keep_dims: bool = False) -> Val:
    return builder.reduce([x], axis, lambda p, q: builder.binary("xor", p, q), keep_dims)[0]


def arg_reduce(builder: BlockOps, x: Any, axis: Any, keep_dims: bool, better: str,
               tie_break_left: Any = True) -> list:
    """(extreme value, its index) along `axis`; `better` is ">" (max) or "<" (min).

    As Triton's `_argmax_combine`: with `tie_break_left` the smallest index among equal
    values wins; without it the right operand wins a tie (`where(left > right, left,
    right)`), which in this sequential fold (accumulator left, next element right) is the
    largest index. NaN counts as the extreme value, like the interpreter."""
    x = builder.as_val(x)
    axis_i = int(unwrap(axis)) % len(x.shape)
    index = builder.view(Val("arange", (x.shape[axis_i],), "int32", attrs={"start": 0}),
                         x.shape, (axis_i,))
    left = bool(unwrap(tie_break_left))

    def combine(av: Val, ai: Val, bv: Val, bi: Val) -> tuple:
        equal = builder.compare("==", bv, av)
        tie = builder.binary("and", equal, builder.compare("<", bi, ai)) if left else equal
        take = builder.binary("or", builder.compare(better, bv, av), tie)
        if D.is_float(av.dtype):
            nan_in = builder.binary("and", builder.compare("!=", bv, bv),
                                    builder.compare("==", av, av))
            take = builder.binary("or", take, nan_in)
        return builder.where(take, bv, av), builder.where(take, bi, ai)
    return builder.reduce([x, index], axis_i, combine, keep_dims)


def _extreme(builder: BlockOps, x: Any, axis: Any, return_indices: Any, tie_break_left: Any,
             keep_dims: Any, fn: str, better: str) -> Any:
    if unwrap(return_indices):
        return tuple(arg_reduce(builder, x, axis, keep_dims, better, tie_break_left))
    return builder.reduce([x], axis, lambda p, q: builder.minmax(fn, p, q), keep_dims)[0]


def tl_max(builder: BlockOps, x: Any, axis: Any = None, return_indices: bool = False,
           return_indices_tie_break_left: bool = True, keep_dims: bool = False) -> Any:
    return _extreme(builder, x, axis, return_indices, return_indices_tie_break_left, keep_dims,
                    "_maxp", ">")


def tl_min(builder: BlockOps, x: Any, axis: Any = None, return_indices: bool = False,
           return_indices_tie_break_left: bool = True, keep_dims: bool = False) -> Any:
    return _extreme(builder, x, axis, return_indices, return_indices_tie_break_left, keep_dims,
                    "_minp", "<")


def tl_argmax(builder: BlockOps, x: Any, axis: Any, tie_break_left: bool = True,
              keep_dims: bool = False) -> Val:
    return arg_reduce(builder, x, axis, keep_dims, ">", tie_break_left)[1]


def tl_argmin(builder: BlockOps, x: Any, axis: Any, tie_break_left: bool = True,
              keep_dims: bool = False) -> Val:
    return arg_reduce(builder, x, axis, keep_dims, "<", tie_break_left)[1]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    name[3:]: f for name, f in dict(globals()).items() if name.startswith("tl_")}


# Inductor triton_helpers with a direct implementation (faster to emulate than inlining
# their tl.where formulations; same NaN-propagating semantics).
def _select_one(builder: BlockOps, x: Any, mask: Any, dim: Any, keep_dims: Any = False) -> Val:
    # Inductor's helper picks the one lane where `mask` holds (a looped scan's carry) with
    # integer bitcasts; a masked sum selects the same value without them.
    x = builder.as_val(x)
    zero = builder.const(0, x.dtype)
    return builder.reduce([builder.where(mask, x, zero)], dim,
                          lambda p, q: builder.binary("add", p, q), keep_dims)[0]


def _refuse_sort(builder: BlockOps, *args: Any, **kwargs: Any) -> Val:
    raise builder.fail("tl.sort (Inductor's triton_helpers.sort_with_index, a bitonic sort "
                       "over bitcast values): sorts are not emulated")


def _elementwise(fn: str) -> Callable[..., Val]:
    return lambda builder, x, y: builder.minmax(fn, x, y)


def _reduction(fn: str) -> Callable[..., Val]:
    return lambda builder, x, dim: builder.reduce([x], dim, lambda p, q: builder.minmax(fn, p, q))[0]


HELPERS: dict[str, Callable[..., Any]] = {
    "select_one": _select_one,
    "promote_to_tensor": lambda builder, x: builder.as_val(x),
    "maximum": _elementwise("_maxp"), "minimum": _elementwise("_minp"),
    "max2": _reduction("_maxp"), "min2": _reduction("_minp"),
    "sort_with_index": _refuse_sort,
}
