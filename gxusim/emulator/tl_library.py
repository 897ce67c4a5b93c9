"""The `tl` library as the builder runs it: `triton.language` functions (and tensor
methods of the same names) that create, combine, reshape, load and store blocks.

Each `tl_NAME(builder, ...)` takes the `BlockOps` being built and Triton's arguments and
returns the IR value (or Python value) the call yields; `FUNCTIONS` maps NAME to it.
Reductions and scans are in `tl_reductions`.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from . import dtypes as D
from .block_ops import BlockOps
from .ir import Ptr, Store, Val
from .ops import broadcast_shapes, dtype_name, is_number, unwrap


class AtomicResult:
    """What tl.atomic_add returns: the old values, which the emulator does not provide."""

    def __repr__(self) -> str:
        return "the result of tl.atomic_add (old values are not emulated)"


def tl_program_id(builder: BlockOps, axis: Any = 0) -> Val:
    axis = int(unwrap(axis))
    key = ("pid", axis)
    if key not in builder.pids:
        builder.pids[key] = Val("pid", (), "int32", attrs={"axis": axis}, deps=frozenset({"pid"}))
    return builder.pids[key]


def tl_num_programs(builder: BlockOps, axis: Any = 0) -> Val:
    axis = int(unwrap(axis))
    key = ("nprog", axis)
    if key not in builder.pids:
        builder.pids[key] = Val("nprog", (), "int32", attrs={"axis": axis})
    return builder.pids[key]


def tl_arange(builder: BlockOps, start: Any, end: Any) -> Val:
    start, end = int(unwrap(start)), int(unwrap(end))
    return Val("arange", (end - start,), "int32", attrs={"start": start})


def tl_full(builder: BlockOps, shape: Any, value: Any, dtype: Any) -> Val:
    shape = tuple(int(unwrap(s)) for s in unwrap(shape))
    dt = dtype_name(dtype)
    value = unwrap(value)
    if is_number(value):
        return builder.const(value, dt, shape)
    return builder.broadcast_to(builder.cast(value, dt), shape)


def tl_zeros(builder: BlockOps, shape: Any, dtype: Any) -> Val:
    return tl_full(builder, shape, 0, dtype)


def tl_zeros_like(builder: BlockOps, x: Val) -> Val:
    return builder.const(0, x.dtype, x.shape)


def tl_full_like(builder: BlockOps, x: Val, value: Any, dtype: Any = None) -> Val:
    return tl_full(builder, x.shape, value, dtype or x.dtype)


def tl_cdiv(builder: BlockOps, a: Any, b: Any) -> Any:
    return builder.binary("floordiv", builder.binary("sub", builder.binary("add", a, b), 1), b)


def tl_where(builder: BlockOps, c: Any, a: Any, b: Any) -> Val:
    return builder.where(c, a, b)


def tl_logical_and(builder: BlockOps, a: Any, b: Any) -> Val:
    return builder.binary("and", builder.to_bool(a), builder.to_bool(b))


def tl_logical_or(builder: BlockOps, a: Any, b: Any) -> Val:
    return builder.binary("or", builder.to_bool(a), builder.to_bool(b))


def tl_maximum(builder: BlockOps, a: Any, b: Any, propagate_nan: Any = None) -> Val:
    return builder.minmax("_maxp", a, b)


def tl_minimum(builder: BlockOps, a: Any, b: Any, propagate_nan: Any = None) -> Val:
    return builder.minmax("_minp", a, b)


def tl_clamp(builder: BlockOps, x: Any, lo: Any, hi: Any, propagate_nan: Any = None) -> Val:
    return builder.minmax("_minp", builder.minmax("_maxp", x, lo), hi)


def tl_abs(builder: BlockOps, x: Any) -> Val:
    return builder.math_call("abs", [x])


def tl_fma(builder: BlockOps, a: Any, b: Any, c: Any) -> Val:
    return builder.math_call("fma", [a, b, c])


def tl_sigmoid(builder: BlockOps, x: Any) -> Val:
    return builder.math_call("sigmoid", [x])


def tl_to(builder: BlockOps, x: Any, dtype: Any, fp_downcast_rounding: Any = None,
          bitcast: bool = False) -> Val:
    if unwrap(bitcast):
        return builder.bitcast(x, dtype_name(dtype))
    if unwrap(fp_downcast_rounding) not in (None, "rtne"):
        raise builder.fail(f"fp_downcast_rounding={unwrap(fp_downcast_rounding)!r}")
    return builder.cast(x, dtype_name(dtype))


def tl_cast(builder: BlockOps, x: Any, dtype: Any, fp_downcast_rounding: Any = None,
            bitcast: bool = False) -> Val:
    return tl_to(builder, x, dtype, fp_downcast_rounding, bitcast)


def tl_broadcast_to(builder: BlockOps, x: Any, *shape: Any) -> Val:
    if len(shape) == 1 and isinstance(unwrap(shape[0]), (tuple, list)):
        shape = unwrap(shape[0])
    return builder.broadcast_to(builder.as_val(x), tuple(int(unwrap(s)) for s in shape))


def tl_broadcast(builder: BlockOps, a: Any, b: Any) -> tuple:
    a, b = builder.as_val(a), builder.as_val(b)
    shape = broadcast_shapes(a.shape, b.shape)
    return builder.broadcast_to(a, shape), builder.broadcast_to(b, shape)


def tl_expand_dims(builder: BlockOps, x: Any, axis: Any) -> Val:
    x = builder.as_val(x)
    axes = unwrap(axis)
    axes = [int(unwrap(a)) for a in (axes if isinstance(axes, (tuple, list)) else [axes])]
    rank = len(x.shape) + len(axes)
    axes = sorted(a % rank for a in axes)
    shape, mapping, k = [], [], 0
    for d in range(rank):
        if d in axes:
            shape.append(1)
        else:
            mapping.append(d)
            shape.append(x.shape[k])
            k += 1
    return builder.view(x, tuple(shape), tuple(mapping))


def tl_reshape(builder: BlockOps, x: Any, *shape: Any, can_reorder: bool = False) -> Val:
    x = builder.as_val(x)
    if len(shape) == 1 and isinstance(unwrap(shape[0]), (tuple, list)):
        shape = unwrap(shape[0])
    shape = tuple(int(unwrap(s)) for s in shape)
    if math.prod(shape) != math.prod(x.shape):
        raise builder.fail(f"reshape {x.shape} -> {shape} changes the element count")
    src_dims = [d for d, s in enumerate(x.shape) if s != 1]
    out_dims = [d for d, s in enumerate(shape) if s != 1]
    if [x.shape[d] for d in src_dims] != [shape[d] for d in out_dims]:
        # a regrouping: elements keep their row-major order
        return Val("reshape", shape, x.dtype, (x,), {}, x.deps)
    mapping, it = [], iter(out_dims)
    unit_out = [d for d, s in enumerate(shape) if s == 1]
    for s in x.shape:
        mapping.append(next(it) if s != 1 else (unit_out[0] if unit_out else 0))
    return builder.view(x, shape, tuple(mapping))


tl_view = tl_reshape  # the same in Triton for these shapes


def tl_permute(builder: BlockOps, x: Any, *dims: Any) -> Val:
    x = builder.as_val(x)
    if len(dims) == 1 and isinstance(unwrap(dims[0]), (tuple, list)):
        dims = unwrap(dims[0])
    dims = tuple(int(unwrap(d)) for d in dims)
    shape = tuple(x.shape[d] for d in dims)
    mapping = tuple(dims.index(k) for k in range(len(dims)))
    return builder.view(x, shape, mapping)


def tl_trans(builder: BlockOps, x: Any, *dims: Any) -> Val:
    x = builder.as_val(x)
    if not dims or (len(dims) == 1 and unwrap(dims[0]) is None):
        dims = tuple(reversed(range(len(x.shape))))
    return tl_permute(builder, x, *dims)


def tl_load(builder: BlockOps, pointer: Any, mask: Any = None, other: Any = None,
            boundary_check: Any = (), padding_option: Any = "", cache_modifier: Any = "",
            eviction_policy: Any = "", volatile: Any = False) -> Val:
    if not isinstance(pointer, Ptr):
        raise builder.fail("tl.load of something other than argument pointer + offsets "
                           "(block pointers and tensor descriptors are not supported)")
    offset = builder.as_val(pointer.offset)
    mask = unwrap(mask)
    mask_v = None if mask is None else builder.to_bool(mask)
    other = unwrap(other)
    other_v = None if other is None else builder.cast(other, pointer.elem)
    shapes = [offset.shape] + ([mask_v.shape] if mask_v is not None else []) + \
        ([other_v.shape] if other_v is not None else [])
    shape = broadcast_shapes(*shapes)
    site = builder.add_site("load", pointer, shape)
    builder.loaded.add(pointer.base)
    deps = offset.deps | (mask_v.deps if mask_v is not None else frozenset())
    return builder.emit(Val("load", shape, pointer.elem, (offset, mask_v, other_v),
                            {"base": pointer.base, "site": site}, deps))


def tl_store(builder: BlockOps, pointer: Any, value: Any, mask: Any = None,
             boundary_check: Any = (), cache_modifier: Any = "", eviction_policy: Any = "",
             atomic_add: bool = False) -> None:
    if not isinstance(pointer, Ptr):
        raise builder.fail("tl.store to something other than argument pointer + offsets")
    offset = builder.as_val(pointer.offset)
    value = builder.cast(value, pointer.elem)
    mask = unwrap(mask)
    mask_v = None if mask is None else builder.to_bool(mask)
    shape = broadcast_shapes(offset.shape, value.shape,
                             *([mask_v.shape] if mask_v is not None else []))
    if broadcast_shapes(offset.shape, shape) != shape:
        raise builder.fail("stored value has a larger shape than the pointer block")
    site = builder.add_site("store", pointer, shape)
    builder.stored.add(pointer.base)
    if atomic_add:
        builder.atomic.add(pointer.base)
    builder.stmts.append(Store(pointer.base, pointer.elem, offset, value, mask_v, shape, site,
                               atomic_add))


def tl_atomic_add(builder: BlockOps, pointer: Any, val: Any, mask: Any = None, sem: Any = None,
                  scope: Any = None) -> AtomicResult:
    """Accumulate into memory (Inductor's scatter-add, e.g. embedding backward). The
    launch runs its programs one after another, so the adds are exact and ordered."""
    tl_store(builder, pointer, val, mask, atomic_add=True)
    return AtomicResult()


def _philox_words(builder: BlockOps, seed: Any, offset: Any, n_rounds: Any) -> tuple[Val, ...]:
    """The four uint32 words of Triton's Philox at each offset (`runtime._philox`): the
    counter is the offset's low and high 32 bits (high 0 for offsets of 32 bits or less)."""
    rounds = unwrap(n_rounds)
    if not isinstance(rounds, int):
        raise builder.fail("Philox rounds (n_rounds) must be a constant")
    offset = builder.as_val(offset)
    if not D.is_int(offset.dtype):
        raise builder.fail(f"random-number offsets of {offset.dtype}: Triton takes integers")
    low = builder.cast(offset, "uint32")
    high = builder.cast(builder.binary("rshift", offset, 32), "uint32") \
        if D.bits(offset.dtype) > 32 else builder.const(0, "uint32", offset.shape)
    seed = builder.cast(seed, "int64")  # Triton widens the seed to 64 bits, sign and all
    return tuple(builder.ew(f"_philox({{0}}, {{1}}, {{2}}, {word}, {rounds})", [seed, low, high],
                            "uint32", ["int64", "uint32", "uint32"]) for word in range(4))


def tl_randint4x(builder: BlockOps, seed: Any, offset: Any, n_rounds: Any = 10) -> tuple[Val, ...]:
    return _philox_words(builder, seed, offset, n_rounds)


def tl_randint(builder: BlockOps, seed: Any, offset: Any, n_rounds: Any = 10) -> Val:
    return _philox_words(builder, seed, offset, n_rounds)[0]


def tl_rand(builder: BlockOps, seed: Any, offset: Any, n_rounds: Any = 10) -> Val:
    word = _philox_words(builder, seed, offset, n_rounds)[0]
    return builder.ew("_uniform({0})", [word], "fp32", ["uint32"])


def tl_randn(builder: BlockOps, seed: Any, offset: Any, n_rounds: Any = 10) -> Val:
    words = _philox_words(builder, seed, offset, n_rounds)
    return builder.ew("_normal({0}, {1})", list(words[:2]), "fp32", ["uint32", "uint32"])


FUNCTIONS: dict[str, Callable[..., Any]] = {
    name[3:]: f for name, f in dict(globals()).items() if name.startswith("tl_")}
