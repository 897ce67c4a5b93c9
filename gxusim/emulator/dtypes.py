"""Triton dtypes as the emulator sees them: promotion rules and numba spellings.

Values are named by Triton's dtype names (`tl.float32.name == "fp32"`). fp16 and bf16
values are carried as float32 numbers that are always exactly representable in the
narrow type (every op result is rounded to nearest-even), so narrow arithmetic is exact
without numba supporting half types; in memory they are raw uint16 bit patterns.
"""
from __future__ import annotations

import numpy as np
import torch

FLOATS = {"fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64}
SIGNED = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
UNSIGNED = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
BOOL = "int1"
ALL = (BOOL, *FLOATS, *SIGNED, *UNSIGNED)

# numba/numpy spelling of the type a value is computed and held in.
COMPUTE = {BOOL: "np.bool_", "fp16": "np.float32", "bf16": "np.float32", "fp32": "np.float32",
           "fp64": "np.float64", **{n: f"np.{n}" for n in SIGNED}, **{n: f"np.{n}" for n in UNSIGNED}}
COMPUTE_NP = {name: getattr(np, spelling[3:]) for name, spelling in COMPUTE.items()}

TORCH_TO_TL = {
    torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
    torch.int8: "int8", torch.int16: "int16", torch.int32: "int32", torch.int64: "int64",
    torch.uint8: "uint8", torch.bool: BOOL,
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        TORCH_TO_TL[getattr(torch, _name)] = _name


def is_integer(dt: str) -> bool:
    return dt in SIGNED or dt in UNSIGNED


def is_float(dt: str) -> bool:
    return dt in FLOATS


def is_int(dt: str) -> bool:
    return dt in SIGNED or dt in UNSIGNED or dt == BOOL


def bits(dt: str) -> int:
    return 1 if dt == BOOL else {**FLOATS, **SIGNED, **UNSIGNED}[dt]


def itemsize(dt: str) -> int:
    return max(1, bits(dt) // 8)


def _int_promote(a: str, b: str) -> str:
    # Triton's integer_promote_impl: the wider type wins; equal widths of mixed
    # signedness give the unsigned type.
    if a == b:
        return a
    wa, wb = bits(a), bits(b)
    if wa != wb:
        return a if wa > wb else b
    return a if a in UNSIGNED else b


def promote(a: str, b: str, div: bool = False) -> str:
    """Triton's computation type of a binary op on two tensors of dtypes a and b."""
    if is_float(a) or is_float(b):
        if "fp64" in (a, b):
            return "fp64"
        if "fp32" in (a, b) or {a, b} == {"fp16", "bf16"}:
            return "fp32"
        return a if is_float(a) else b
    if div:  # int / int is true division in fp32
        return "fp32"
    return _int_promote(a, b)


def python_scalar_dtype(value: object) -> str:
    """dtype Triton gives a Python scalar argument or literal on its own."""
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return "int32" if -2**31 <= int(value) < 2**31 else "int64"
    if isinstance(value, (float, np.floating)):
        return "fp32"
    raise TypeError(f"not a scalar: {value!r}")


def weak_scalar_dtype(value: object, other: str) -> str:
    """dtype a Python literal takes next to a tensor of dtype `other` (it does not upcast it)."""
    if isinstance(value, (bool, np.bool_)):
        return other
    if isinstance(value, (int, np.integer)):
        if is_float(other):
            return other
        if other == BOOL:
            return python_scalar_dtype(value)
        return other if _fits(int(value), other) else python_scalar_dtype(value)
    return other if is_float(other) else "fp32"


def _fits(value: int, dt: str) -> bool:
    if dt in SIGNED:
        return -2**(bits(dt) - 1) <= value < 2**(bits(dt) - 1)
    if dt in UNSIGNED:
        return 0 <= value < 2**bits(dt)
    return False


def literal(value: object, dt: str) -> str:
    """Numba source for a constant of dtype dt."""
    if dt == BOOL:
        return "True" if value else "False"
    if is_float(dt):
        v = float(value)
        if v != v:
            text = "np.nan"
        elif v in (float("inf"), float("-inf")):
            text = "np.inf" if v > 0 else "-np.inf"
        else:
            text = repr(v)
        spelled = f"{COMPUTE[dt]}({text})"
        return f"_rf16({spelled})" if dt == "fp16" else f"_rbf16({spelled})" if dt == "bf16" else spelled
    return f"{COMPUTE[dt]}({int(value)})"


def convert(expr: str, src: str, dst: str) -> str:
    """Numba source converting a value of dtype src to dst (Triton's `.to` semantics)."""
    if src == dst:
        return expr
    if dst == BOOL:
        return f"({expr} != 0)"
    if dst == "fp16":
        return f"_rf16(np.float32({expr}))" if src != "fp32" else f"_rf16({expr})"
    if dst == "bf16":
        return f"_rbf16(np.float32({expr}))" if src != "fp32" else f"_rbf16({expr})"
    if is_int(dst) and is_float(src):
        # the GPU's float->int conversion truncates and saturates (NaN -> 0)
        width = bits(dst)
        lo, hi = (0, 2**width - 1) if dst in UNSIGNED else (-2**(width - 1), 2**(width - 1) - 1)
        hi = float(hi) if width < 64 else float(hi - 1024)  # largest float64 below the max
        return f"{COMPUTE[dst]}(_fclamp(np.float64({expr}), {float(lo)!r}, {hi!r}))"
    return f"{COMPUTE[dst]}({expr})"


# A value's bits as the unsigned integer of its width, and a dtype's value from such bits:
# `.to(dtype, bitcast=True)` goes through both. Narrow floats are carried as exact float32
# numbers, so their bits are their IEEE conversion's (a NaN's payload is not kept).
_TO_BITS = {"fp16": "_f2h({0})", "bf16": "_f2bf({0})", "fp32": "_f32_bits({0})",
            "fp64": "np.uint64(_f64_bits({0}))",
            **{n: f"np.uint{bits(n)}({{0}})" for n in (*SIGNED, *UNSIGNED)}}
_FROM_BITS = {"fp16": "_h2f({0})", "bf16": "_bf2f({0})", "fp32": "_bits_f32(np.uint32({0}))",
              "fp64": "_bits_f64(np.int64({0}))",
              **{n: f"{COMPUTE[n]}({{0}})" for n in (*SIGNED, *UNSIGNED)}}


def bitcast(src: str, dst: str) -> str | None:
    """A template (`{0}`: the value) reinterpreting src's bits as dst's, as Triton's
    `.to(dst, bitcast=True)` does; None where Triton refuses it (widths differ, or a bool)."""
    if src == dst:
        return "{0}"
    if BOOL in (src, dst) or bits(src) != bits(dst):
        return None
    return _FROM_BITS[dst].format(_TO_BITS[src])


def normalize(expr: str, dt: str) -> str:
    """Numba source forcing an op result into dtype dt (wrap ints, round narrow floats)."""
    if dt == BOOL:
        return f"({expr})"
    if dt == "fp16":
        return f"_rf16(np.float32({expr}))"
    if dt == "bf16":
        return f"_rbf16(np.float32({expr}))"
    return f"{COMPUTE[dt]}({expr})"
