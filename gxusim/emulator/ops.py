"""Op semantics: what Triton's operators and library names mean to the emulator.

Numba templates of binary operators and math functions, Python folding of constant
operands, shape broadcasting and dtype rules of reductions, and which `tl.*` names are
refused, ignored or passed through. The builder consults these tables; it holds no state.
"""
from __future__ import annotations

import ast
import math
from typing import Any, Callable, Optional

import triton.language as tl
from triton.runtime.jit import JITFunction

from . import dtypes as D
from .ir import Unsupported, Val


def is_number(x: Any) -> bool:
    """A Python number (folded at build time), not an IR value."""
    return isinstance(x, (bool, int, float)) and not isinstance(x, Val)


def unwrap(x: Any) -> Any:
    """The value inside a `tl.constexpr`."""
    return x.value if isinstance(x, tl.constexpr) else x


def broadcast_shapes(*shapes: tuple) -> tuple:
    """Triton's (numpy's) broadcast of block shapes; raises `Unsupported` if they clash."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        size = 1
        for s in shapes:
            k = d - (rank - len(s))
            if k < 0 or s[k] == 1:
                continue
            if size != 1 and s[k] != size:
                raise Unsupported(f"shapes {shapes} do not broadcast")
            size = s[k]
        out.append(size)
    return tuple(out)


def dtype_name(x: Any) -> str:
    """The Triton dtype name ("fp32", ...) of a `tl.dtype` or name."""
    x = unwrap(x)
    if isinstance(x, str):
        name = x
    elif isinstance(x, tl.dtype):
        name = x.name
    else:
        raise Unsupported(f"dtype {x!r}")
    if name not in D.ALL:
        raise Unsupported(f"dtype {name}")
    return name


# Elementwise math: Triton/libdevice/tl_math name -> (numba template, kind). kind "float":
# float result of the input's float type; "pred": int1 result; "same": input dtype; a
# dtype name: a result of that type.
MATH: dict[str, tuple[str, str]] = {
    "exp": ("math.exp({0})", "float"), "exp2": ("math.pow(2.0, {0})", "float"),
    "log": ("math.log({0})", "float"), "log2": ("math.log2({0})", "float"),
    "log10": ("math.log10({0})", "float"), "log1p": ("math.log1p({0})", "float"),
    "expm1": ("math.expm1({0})", "float"), "sqrt": ("math.sqrt({0})", "float"),
    "sqrt_rn": ("math.sqrt({0})", "float"), "rsqrt": ("(1.0 / math.sqrt(np.float64({0})))", "float"),
    "sin": ("math.sin({0})", "float"), "cos": ("math.cos({0})", "float"),
    "tan": ("math.tan({0})", "float"), "asin": ("math.asin({0})", "float"),
    "acos": ("math.acos({0})", "float"), "atan": ("math.atan({0})", "float"),
    "sinh": ("math.sinh({0})", "float"), "cosh": ("math.cosh({0})", "float"),
    "tanh": ("_tanh({0})", "float"), "asinh": ("math.asinh({0})", "float"),
    "acosh": ("math.acosh({0})", "float"), "atanh": ("math.atanh({0})", "float"),
    "erf": ("math.erf({0})", "float"), "erfc": ("math.erfc({0})", "float"),
    "lgamma": ("math.lgamma({0})", "float"), "floor": ("math.floor({0})", "float"),
    "ceil": ("math.ceil({0})", "float"), "trunc": ("math.trunc({0})", "float"),
    "nearbyint": ("_rint({0})", "float"), "rint": ("_rint({0})", "float"),
    "round": ("math.copysign(math.floor(abs({0}) + 0.5), {0})", "float"),
    "sigmoid": ("(1.0 / (1.0 + math.exp(-np.float64({0}))))", "float"),
    "abs": ("abs({0})", "same"), "fabs": ("abs({0})", "float"),
    "isnan": ("({0} != {0})", "pred"), "isinf": ("math.isinf({0})", "pred"),
    "isfinited": ("math.isfinite({0})", "pred"), "finitef": ("math.isfinite({0})", "pred"),
    "signbit": ("(math.copysign(1.0, {0}) < 0)", "pred"),
    "pow": ("math.pow({0}, {1})", "float"), "atan2": ("math.atan2({0}, {1})", "float"),
    "fmod": ("np.fmod({0}, {1})", "float"), "copysign": ("math.copysign({0}, {1})", "float"),
    "hypot": ("math.hypot({0}, {1})", "float"), "div_rn": ("({0} / {1})", "float"),
    "fdiv": ("({0} / {1})", "float"), "div": ("({0} / {1})", "float"),
    "fma": ("(np.float64({0}) * {1} + {2})", "float"),
    "fmax": ("_maxp({0}, {1})", "float"), "fmin": ("_minp({0}, {1})", "float"),
    "mul_rn": ("({0} * {1})", "float"), "nextafter": ("np.nextafter({0}, {1})", "float"),
    "ldexp": ("math.ldexp({0}, int({1}))", "float"), "ilogb": ("_ilogb({0})", "int32"),
    "llrint": (D.convert("_rint({0})", "fp64", "int64"), "int64"),
    "fast_tanhf": ("_tanh({0})", "float"), "erfinv": ("_erfinv({0})", "float"),
    "erfcx": ("_erfcx({0})", "float"), "cyl_bessel_i0": ("_bessel_i({0}, 0)", "float"),
    "cyl_bessel_i1": ("_bessel_i({0}, 1)", "float"),
}

AST_BINARY_OPS: dict[type, str] = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
    ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "lshift",
    ast.RShift: "rshift",
}
AST_COMPARISONS: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
                                    ast.Eq: "==", ast.NotEq: "!="}
# binary op -> (template for ints, template for floats); None: not defined for that kind
BINARY_TEMPLATES: dict[str, tuple[Optional[str], Optional[str]]] = {
    "add": ("({0} + {1})",) * 2, "sub": ("({0} - {1})",) * 2, "mul": ("({0} * {1})",) * 2,
    "truediv": (None, "({0} / {1})"), "floordiv": ("_idiv({0}, {1})", "_ffloordiv({0}, {1})"),
    "mod": ("_irem({0}, {1})", "np.fmod({0}, {1})"), "and": ("({0} & {1})", None),
    "or": ("({0} | {1})", None), "xor": ("({0} ^ {1})", None),
    "lshift": ("({0} << {1})", None), "rshift": ("({0} >> {1})", None),
}
PYTHON_BINARY_OPS: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b, "rshift": lambda a, b: a >> b,
}
PYTHON_COMPARISONS: dict[str, Callable] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


def sum_dtype(dtype: str) -> str:
    """Triton's accumulation type for sums and products: small integers widen to 32 bits."""
    if dtype == D.BOOL or dtype in D.SIGNED and D.bits(dtype) < 32:
        return "int32"
    return "uint32" if dtype in D.UNSIGNED and D.bits(dtype) < 32 else dtype


# Triton library functions the emulator refuses where the kernel calls them (their
# implementations would otherwise be inlined and fail deep inside Triton's own source).
UNSUPPORTED_TL = {
    "dot_scaled": "scaled (microscaling) matrix products",
}
IGNORED_TL = {"static_assert", "device_assert", "static_print", "device_print", "debug_barrier",
              "assume"}
IDENTITY_TL = {"multiple_of", "max_contiguous", "max_constancy"}
# Launch options a launcher may pass among the constexprs (not kernel parameters).
LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "waves_per_eu", "matrix_instr_nonkdim", "kpack", "debug", "launch_cooperative_grid",
                  "launch_pdl"}


def classify_callable(f: Any) -> tuple[str, str]:
    """(category, name) of a callable the kernel calls: 'tl', 'math', 'helper' or 'other'."""
    target = f.fn if isinstance(f, JITFunction) else f
    name = getattr(target, "__name__", "")
    module = getattr(target, "__module__", "") or ""
    if "libdevice" in module or module == "triton.language.math":
        return "math", name
    if module.startswith("triton.language"):
        return "tl", name
    if module.endswith("triton_helpers"):
        return "helper", name
    return "other", name



def flat_index(shape: tuple, idx: list) -> str:
    """The row-major position of the element at index expressions `idx` of a block of
    `shape` (an expression; unit axes and zero indices left out)."""
    terms, stride = [], 1
    for size, i in reversed(list(zip(shape, idx))):
        if i != "0" and size != 1:
            terms.append(i if stride == 1 else f"{i} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) or "0"


def unflat_index(shape: tuple, position: str) -> list[str]:
    """Index expressions, in a block of `shape`, of the element at row-major `position`."""
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    return [f"(({position}) // {stride}) % {size}" if stride > 1 else f"({position}) % {size}"
            for stride, size in zip(strides, shape)]
