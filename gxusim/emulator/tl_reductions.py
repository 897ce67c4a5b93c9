"""Reductions and scans of the `tl` library, and Inductor's `triton_helpers` that the
builder runs natively instead of inlining them.

Every one becomes a `Reduce` statement (`BlockOps.reduce`) with its combine body; argmax
and argmin carry (value, index) pairs. `FUNCTIONS` maps `tl` names, `HELPERS` helper names.
"""
from __future__ import annotations

import os
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


# tl.dot: the smallest K Triton's NVIDIA backend accepts, by operand width (M and N: any).
DOT_MIN_K = {8: 32, 16: 16, 32: 8, 64: 4}
DOT_INPUT_PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")
_TF32_KEPT_BITS = -8192  # 0xFFFFE000: sign, exponent and tf32's 10 mantissa bits


def _truncated_to_tf32(builder: BlockOps, x: Val) -> Val:
    """An fp32 operand as the tensor cores read it in TF32 mode: the low 13 mantissa bits
    ignored (Triton converts nothing for plain tf32)."""
    bits = builder.binary("and", builder.bitcast(x, "int32"), _TF32_KEPT_BITS)
    return builder.bitcast(bits, "fp32")


def _rounded_to_tf32(builder: BlockOps, x: Val) -> Val:
    """cvt.rna.tf32.f32: to the nearest tf32, ties away from zero (3xTF32's big part)."""
    bits = builder.binary("add", builder.bitcast(x, "int32"), 4096)
    return builder.bitcast(builder.binary("and", bits, _TF32_KEPT_BITS), "fp32")


def _split(builder: BlockOps, x: Val, parts: int, big: Callable[[BlockOps, Val], Val]) -> list:
    """x as `parts` terms, each the rounding `big` of what the terms before it leave."""
    terms, rest = [], x
    for _ in range(parts):
        terms.append(big(builder, rest))
        rest = builder.binary("sub", rest, terms[-1])
    return terms


def _bf16(builder: BlockOps, x: Val) -> Val:
    return builder.cast(builder.cast(x, "bf16"), "fp32")


def _products(a: Val, b: Val, precision: str, builder: BlockOps) -> list[tuple[Val, Val]]:
    """The operand pairs an fp32 dot multiplies at this input precision (Triton's F32DotTC
    splits: 3xTF32 adds big*small and small*big to big*big; bf16x3 and bf16x6 the same with
    two and three bf16 terms)."""
    if precision == "ieee":
        return [(a, b)]
    if precision == "tf32":
        return [(_truncated_to_tf32(builder, a), _truncated_to_tf32(builder, b))]
    if precision == "tf32x3":
        (a_big, a_small), (b_big, b_small) = (_split(builder, v, 2, _rounded_to_tf32) for v in (a, b))
        return [(_truncated_to_tf32(builder, a_small), _truncated_to_tf32(builder, b_big)),
                (_truncated_to_tf32(builder, a_big), _truncated_to_tf32(builder, b_small)),
                (a_big, b_big)]
    terms = 2 if precision == "bf16x3" else 3
    at, bt = _split(builder, a, terms, _bf16), _split(builder, b, terms, _bf16)
    return [(at[i], bt[j]) for order in reversed(range(terms)) for i in range(order + 1)
            for j in (order - i,)]


def tl_dot(builder: BlockOps, input: Any, other: Any, acc: Any = None, input_precision: Any = None,
           allow_tf32: Any = None, max_num_imprecise_acc: Any = None, out_dtype: Any = None
           ) -> Val:
    """Matrix product of 2-D (or batched 3-D) blocks with Triton's rules: both operands of
    one dtype, K at least DOT_MIN_K for their width, fp16/bf16/fp32 products accumulated in
    fp32 (fp16 may ask for fp16), int8 in int32, fp64 in fp64; fp32 operands at the input
    precision asked for (default tf32, as Triton's NVIDIA backend), then `acc` added."""
    a, b = builder.as_val(input), builder.as_val(other)
    if a.dtype != b.dtype:
        raise builder.fail(f"tl.dot of {a.dtype} and {b.dtype}: Triton needs one dtype")
    if a.dtype not in ("int8", "uint8", "fp16", "bf16", "fp32", "fp64"):
        raise builder.fail(f"tl.dot of {a.dtype} operands (Triton takes int8, uint8, fp16, "
                           f"bf16, fp32, fp64; fp8 is not emulated)")
    if not (len(a.shape) == len(b.shape) in (2, 3)) or a.shape[-1] != b.shape[-2] \
            or a.shape[:-2] != b.shape[:-2]:
        raise builder.fail(f"tl.dot of blocks {a.shape} and {b.shape} (2-D [M, K] x [K, N], "
                           f"or 3-D with one batch size)")
    min_k = DOT_MIN_K[D.bits(a.dtype)]
    if a.shape[-1] < min_k:
        raise builder.fail(f"tl.dot with K = {a.shape[-1]}: Triton needs K >= {min_k} for "
                           f"{a.dtype} operands")
    if unwrap(allow_tf32) is not None and unwrap(input_precision) is None:
        input_precision = "tf32" if unwrap(allow_tf32) else "ieee"
    precision = str(unwrap(input_precision) or _default_dot_precision()).lower()
    if precision not in DOT_INPUT_PRECISIONS:
        raise builder.fail(f"tl.dot input_precision={precision!r} (one of "
                           f"{', '.join(DOT_INPUT_PRECISIONS)})")
    asked = dtype_name(out_dtype) if unwrap(out_dtype) is not None else None
    if D.is_int(a.dtype):
        accumulate = "int32"
    elif a.dtype == "fp64":
        accumulate = "fp64"
    elif a.dtype == "fp16" and asked == "fp16":
        accumulate = "fp16"
    elif asked == "bf16":
        raise builder.fail("tl.dot out_dtype=bfloat16 (Triton refuses it: accumulate in "
                           "float32 and cast)")
    else:
        accumulate = "fp32"
    acc = None if unwrap(acc) is None else builder.as_val(acc)
    *batch, m, k = a.shape
    n = b.shape[-1]
    out_shape = (*batch, m, n)
    if acc is not None and (acc.shape != out_shape or acc.dtype != accumulate):
        raise builder.fail(f"tl.dot accumulator {acc.dtype}{list(acc.shape)}: expected "
                           f"{accumulate}{list(out_shape)}")
    rank, operands = len(batch), a.dtype
    wide = "fp32" if accumulate == "fp16" else accumulate
    a, b = builder.cast(a, wide), builder.cast(b, wide)
    pairs = _products(a, b, precision, builder) if operands == "fp32" else [(a, b)]
    total = None
    for left, right in pairs:
        # [.., M, K, 1] * [.., 1, K, N] summed over K
        lhs = builder.view(left, (*batch, m, k, 1), tuple(range(rank + 2)))
        rhs = builder.view(right, (*batch, 1, k, n), (*range(rank), rank + 1, rank + 2))
        part = tl_sum(builder, builder.binary("mul", lhs, rhs), axis=rank + 1, dtype=None)
        total = part if total is None else builder.binary("add", total, part)
    total = builder.cast(total, accumulate)
    return total if acc is None else builder.cast(builder.binary("add", acc, total), accumulate)


def _default_dot_precision() -> str:
    """Triton's default for fp32 operands: tf32, unless TRITON_F32_DEFAULT says otherwise."""
    return os.environ.get("TRITON_F32_DEFAULT") or "tf32"


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
    raise builder.fail("Inductor's triton_helpers.sort_with_index (a bitonic sort of values "
                       "with their indices over bitcast keys) is not emulated")


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
