"""Random torch programs for differential fuzzing (see the package docstring), and their runner.

A `Program` is Python source for `fn(x0, x1, ...)` plus one `InputSpec` per argument. Every
value of the program is tracked, while it is built, with meta tensors for both call sizes
(A and, for dynamic runs, B) and with facts that keep the comparison with eager sound:

* `exact`: the value is computed without any rounding (small dyadic inputs; add, mul, casts,
  max, where, views, ... whose results stay representable), so any correct implementation
  gives bit-identical results. Only exact values feed ops whose result is discontinuous in
  their input (comparisons between tensors, argmax, casts to int or bool, floor division),
  so an allowed rounding difference can never flip an integer or bool result.
* `lowp`: an inexact value that went through fp16/bf16, where eager rounds every intermediate
  and Inductor does not: such values feed only continuous ops.
* `bound`, `denom`: |value| <= bound, value is a multiple of 2**-denom (when exact); used to
  avoid overflow (fp16, int32) and to decide exactness.
* `finite`: no NaN/inf possible (mean/var of empty or one-element dims can make NaN).
"""
from __future__ import annotations

import dataclasses
import math
import re
import traceback
from typing import Any, Callable, Optional

import torch
from hypothesis import strategies as st

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
I32, I64, BOOL = torch.int32, torch.int64, torch.bool
FLOATS = (F32, F16, BF16)
INTS = (I32, I64)
DTYPES = FLOATS + INTS + (BOOL,)
MANT = {F32: 24, F16: 11, BF16: 8, F64: 53}
FMAX = {F32: 1e30, F16: 6e4, BF16: 1e30, F64: 1e300}
IMAX = {I32: 2 ** 31 - 1, I64: 2 ** 62, BOOL: 1}
EPS = {F32: 2.0 ** -23, F16: 2.0 ** -10, BF16: 2.0 ** -7, F64: 2.0 ** -52}
NAMES = {F32: "torch.float32", F16: "torch.float16", BF16: "torch.bfloat16", I32: "torch.int32",
         I64: "torch.int64", BOOL: "torch.bool"}
# Thresholds for comparing inexact fp32 values: far from values programs hit exactly.
ODD = (0.3137, -0.7071, 1.2345, -0.0421)
LIMIT = 1e4  # keep float magnitudes below this (fp16 max is 65504)
INEXACT_DENOM = 1000


def is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point


def representable(bound: float, denom: int, dt: torch.dtype) -> bool:
    """Every multiple of 2**-denom with magnitude <= bound is exact in `dt`."""
    if dt == BOOL:
        return denom == 0 and bound <= 1
    if dt in INTS:
        return denom == 0 and bound <= IMAX[dt]
    if denom >= INEXACT_DENOM:
        return False
    return bound <= FMAX[dt] and bound * 2.0 ** max(denom, 0) <= 2.0 ** MANT[dt]


@dataclasses.dataclass
class InputSpec:
    """How to make one argument: a contiguous base of `base` shape, then `view` (source text
    applied to `b`) on the device; data kind: 'grid' (k/4, |k| <= 8), 'normal' (clamped
    randn), 'int' (randint in [-hi, hi]), 'bool', 'index' (randint in [0, hi))."""
    dtype: torch.dtype
    kind: str
    base: tuple[tuple[int, ...], tuple[int, ...]]  # base shape for call A, call B
    view: str = "b"
    hi: tuple[int, int] = (0, 0)
    shape: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # after the view, per call

    def make(self, call: int, gen: torch.Generator) -> torch.Tensor:
        shape = self.base[call]
        if self.kind == "grid":
            t = torch.randint(-8, 9, shape, generator=gen).float() / 4
        elif self.kind == "normal":
            t = torch.randn(shape, generator=gen).clamp(-3, 3)
        elif self.kind == "int":
            t = torch.randint(-self.hi[call], self.hi[call] + 1, shape, generator=gen)
        elif self.kind == "bool":
            t = torch.randint(0, 2, shape, generator=gen).bool()
        elif self.kind == "index":
            t = torch.randint(0, max(self.hi[call], 1), shape, generator=gen)
        else:
            raise ValueError(self.kind)
        return t.to(self.dtype)

    def apply_view(self, b: torch.Tensor, call: int) -> torch.Tensor:
        return eval(self.view, {"torch": torch, "b": b, "S": self.shape[call]})

    def to_json(self) -> dict:
        return {"dtype": NAMES[self.dtype], "kind": self.kind, "base": self.base,
                "view": self.view, "hi": self.hi, "shape": self.shape}

    @staticmethod
    def from_json(d: dict) -> "InputSpec":
        return InputSpec(eval(d["dtype"], {"torch": torch}), d["kind"],
                         tuple(tuple(s) for s in d["base"]), d["view"], tuple(d["hi"]),
                         tuple(tuple(s) for s in d["shape"]))


@dataclasses.dataclass
class Program:
    source: str  # defines fn(x0, ...)
    inputs: list[InputSpec]
    dynamic: Optional[bool]  # torch.compile(dynamic=...); True/None: called twice (A, B)
    seed: int
    exact_outputs: list[bool]  # per output: must match eager bit for bit
    calls: int = 1

    def fn(self, dtype_map: Optional[dict] = None) -> Callable:
        src = self.source
        for old, new in (dtype_map or {}).items():
            src = src.replace(NAMES[old], NAMES.get(new, "torch.float64"))
        scope: dict[str, Any] = {"torch": torch}
        exec(compile(src, "<fuzz program>", "exec"), scope)
        return scope["fn"]

    def make_inputs(self, call: int, device: str) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 7919 + call)
        bases = [spec.make(call, gen) for spec in self.inputs]
        return [spec.apply_view(b.to(device), call) for spec, b in zip(self.inputs, bases)]

    def describe(self) -> str:
        lines = [self.source.rstrip(), f"# dynamic={self.dynamic} calls={self.calls} seed={self.seed}"]
        for i, spec in enumerate(self.inputs):
            lines.append(f"# x{i}: {NAMES[spec.dtype]} {spec.kind} base A{spec.base[0]} "
                         f"B{spec.base[1]} view {spec.view!r}" + (f" hi={spec.hi}" if spec.kind in ("int", "index") else ""))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"source": self.source, "inputs": [s.to_json() for s in self.inputs],
                "dynamic": self.dynamic, "seed": self.seed, "exact_outputs": self.exact_outputs,
                "calls": self.calls}

    @staticmethod
    def from_json(d: dict) -> "Program":
        return Program(d["source"], [InputSpec.from_json(s) for s in d["inputs"]], d["dynamic"],
                       d["seed"], d["exact_outputs"], d["calls"])


# ----------------------------------------------------------------------------- building

@dataclasses.dataclass
class Val:
    name: str
    meta: tuple[torch.Tensor, torch.Tensor]  # meta tensors for call A and call B
    exact: bool
    bound: float
    denom: int
    lowp: bool = False
    finite: bool = True

    @property
    def dtype(self) -> torch.dtype:
        return self.meta[0].dtype

    def shape(self, call: int) -> tuple[int, ...]:
        return tuple(self.meta[call].shape)

    @property
    def ndim(self) -> int:
        return self.meta[0].dim()


class Reject(Exception):
    """This op does not apply to the chosen operands; draw another."""


# Sizes worth drawing besides small ones: empty and unit dims, odd sizes, and sizes at and
# around multiples of Inductor's largest block (4096), where it drops masks, up to the
# largest gxu tile (32768), whose tile counts are whole.
SIZES = (1, 1, 0, 16, 33, 130, 700, 4095, 4096, 4097, 8192, 12288, 32768)
MAX_NUMEL = 40_000  # per input and value: what the emulator runs in a moment


class Builder:
    def __init__(self, draw: Callable, dynamic: bool):
        self.draw = draw
        self.dynamic = dynamic
        self.inputs: list[InputSpec] = []
        self.args: list[Val] = []
        self.vals: list[Val] = []
        self.lines: list[str] = []
        self.sizes: list[tuple[int, int]] = []

    # ---- helpers
    def pick(self, seq):
        return self.draw(st.sampled_from(list(seq)))

    def boolean(self, p_true: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < p_true * 100

    def size_pair(self) -> tuple[int, int]:
        a = self.draw(st.one_of(st.integers(0, 9), st.sampled_from(SIZES)))
        b = a
        if self.dynamic:
            b = self.draw(st.integers(2, 12).filter(lambda v: v != a)) if a > 1 or self.boolean() \
                else a
        return (a, b)

    def meta(self, expr: str, env: dict[str, Val]) -> tuple[torch.Tensor, torch.Tensor]:
        out = []
        for call in (0, 1):
            scope = {"torch": torch, **{n: v.meta[call] for n, v in env.items()}}
            try:
                t = eval(expr, scope)
            except Exception as e:  # invalid for these shapes/dtypes: not a program eager runs
                raise Reject(str(e)) from None
            if not isinstance(t, torch.Tensor):
                raise Reject("not a tensor")
            out.append(t)
        if out[0].dtype != out[1].dtype or out[0].dim() != out[1].dim():
            raise Reject("calls differ")
        if max(t.numel() for t in out) > MAX_NUMEL:
            raise Reject("too large")
        return out[0], out[1]

    def add(self, expr: str, env: dict[str, Val], exact: bool, bound: float, denom: int = 0,
            lowp: Optional[bool] = None, finite: Optional[bool] = None) -> Val:
        meta = self.meta(expr, env)
        dt = meta[0].dtype
        operands = list(env.values())
        if lowp is None:
            lowp = any(v.lowp for v in operands) or dt in (F16, BF16)
        if finite is None:
            finite = all(v.finite for v in operands)
        if exact and not representable(bound, denom, dt):
            exact = False
        exact_ok = exact
        if dt in INTS or dt == BOOL:
            if not all(v.exact for v in operands if is_float(v.dtype)):
                raise Reject("int/bool from an inexact float")
            if bound > IMAX[dt]:
                raise Reject("int overflow")
            exact_ok = True
        elif bound > LIMIT and finite:
            raise Reject("float magnitude")
        v = Val(f"v{len(self.vals)}", meta, exact_ok, bound, denom if exact_ok else INEXACT_DENOM,
                lowp and not exact_ok, finite)
        self.vals.append(v)
        self.lines.append(f"    {v.name} = {expr}")
        return v

    # ---- inputs
    def new_input(self, dtype: torch.dtype, shape: tuple[tuple[int, ...], tuple[int, ...]],
                  kind: Optional[str] = None, hi: tuple[int, int] = (0, 0),
                  layout: bool = True) -> Val:
        if kind is None:
            kind = ("grid" if self.boolean(0.6) else "normal") if is_float(dtype) else \
                "bool" if dtype == BOOL else "int"
        if kind == "int" and hi == (0, 0):
            h = self.pick([3, 3, 100, 30000])
            hi = (h, h)
        base, view = shape, "b"
        nd = len(shape[0])
        choice = self.pick(["contiguous"] * 3 + ["transposed", "strided", "expanded", "offset"]) \
            if layout and nd else "contiguous"
        if choice == "transposed" and nd >= 2:
            perm = list(self.draw(st.permutations(range(nd))))
            inv = [perm.index(i) for i in range(nd)]
            base = tuple(tuple(s[p] for p in perm) for s in shape)
            view = f"b.permute({', '.join(map(str, inv))})"
        elif choice == "strided":
            d = self.draw(st.integers(0, nd - 1))
            base = tuple(s[:d] + (2 * s[d],) + s[d + 1:] for s in shape)
            view = f"b[{':, ' * d}::2]"
        elif choice == "expanded":
            d = self.draw(st.integers(0, nd - 1))
            base = tuple(s[:d] + (1,) + s[d + 1:] for s in shape)
            view = "b.expand(S)"  # S: this call's shape
        elif choice == "offset":
            d = self.draw(st.integers(0, nd - 1))
            base = tuple(s[:d] + (s[d] + 1,) + s[d + 1:] for s in shape)
            view = f"b[{':, ' * d}1:]"
        if max(math.prod(b) for b in base) > MAX_NUMEL:  # a strided base of a large shape
            base, view = shape, "b"
        spec = InputSpec(dtype, kind, base, view, hi, shape)
        if kind == "grid":
            exact, bound, denom = True, 2.0, 2
        elif kind == "normal":
            exact, bound, denom = True, 3.0, INEXACT_DENOM - 1  # exact as given; any rounding op makes it inexact
        elif kind in ("int", "index"):
            exact, bound, denom = True, float(max(hi)), 0
        else:
            exact, bound, denom = True, 1.0, 0
        name = f"x{len(self.inputs)}"
        metas = tuple(torch.empty(shape[c], dtype=dtype, device="meta") for c in (0, 1))
        v = Val(name, metas, exact, bound, denom)
        self.inputs.append(spec)
        self.args.append(v)
        return v

    def random_shape(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        nd = self.draw(st.integers(0, 3))
        dims = [self.sizes[self.draw(st.integers(0, len(self.sizes) - 1))] if self.boolean(0.8)
                else (1, 1) for _ in range(nd)]
        while any(math.prod(d[c] for d in dims) > MAX_NUMEL for c in (0, 1)):
            dims[max(range(nd), key=lambda i: max(dims[i]))] = (1, 1)  # the largest dim goes
        return tuple(d[0] for d in dims), tuple(d[1] for d in dims)

    def pool(self, pred: Callable[[Val], bool] = lambda v: True) -> list[Val]:
        """Candidates satisfying pred; the latest value first and, in half of the draws,
        alone (so programs form chains rather than unused side values)."""
        cands = [v for v in self.args + self.vals if pred(v)]
        if self.vals and pred(self.vals[-1]) and self.boolean(0.5):
            return [self.vals[-1]]
        return cands


# ----------------------------------------------------------------------------- ops
# Each op takes the builder and returns the new Val or raises Reject.

def _float_operand(b: Builder) -> Val:
    c = b.pool(lambda v: is_float(v.dtype))
    if not c:
        raise Reject("no float")
    return b.pick(c)


def op_unary_float(b: Builder) -> Val:
    x = _float_operand(b)
    n = x.name
    name = b.pick(["neg", "abs", "exp", "log", "tanh", "sigmoid", "sin", "erf", "sqrt", "rsqrt",
                   "relu", "scale", "shift", "clamp", "square"])
    env = {n: x}
    if name == "neg":
        return b.add(f"-{n}", env, x.exact, x.bound, x.denom)
    if name == "abs":
        return b.add(f"{n}.abs()", env, x.exact, x.bound, x.denom)
    if name == "relu":
        return b.add(f"torch.relu({n})", env, x.exact, x.bound, x.denom)
    if name == "exp":
        if x.bound > 4:
            return b.add(f"torch.exp(torch.tanh({n}))", env, False, math.e)
        return b.add(f"torch.exp({n})", env, False, math.exp(x.bound))
    if name == "log":
        return b.add(f"torch.log({n}.abs() + 1)", env, False, math.log1p(x.bound))
    if name in ("tanh", "sin", "erf"):
        return b.add(f"torch.{name}({n})", env, False, 1.0)
    if name == "sigmoid":
        return b.add(f"torch.sigmoid({n})", env, False, 1.0)
    if name == "sqrt":
        return b.add(f"torch.sqrt({n}.abs())", env, False, math.sqrt(x.bound))
    if name == "rsqrt":
        return b.add(f"torch.rsqrt({n}.abs() + 0.5)", env, False, math.sqrt(2))
    if name == "scale":
        c = b.pick([0.5, 2.0, -1.5, 3.0])
        return b.add(f"{n} * {c}", env, x.exact, x.bound * abs(c), x.denom + (1 if c in (0.5, -1.5) else 0))
    if name == "shift":
        c = b.pick([0.25, -1.0, 2.5])
        return b.add(f"{n} + {c}", env, x.exact, x.bound + abs(c), max(x.denom, 2))
    if name == "clamp":
        return b.add(f"{n}.clamp(-1.5, 1.0)", env, x.exact, min(x.bound, 1.5), x.denom)
    return b.add(f"{n} * {n}", env, x.exact, x.bound ** 2, 2 * x.denom)


def _second(b: Builder, x: Val, pred=lambda v: True) -> Val:
    """An operand broadcastable with x (for both calls), else a fresh input of a
    broadcastable shape."""
    cands = []
    for v in b.pool(pred):
        try:
            for c in (0, 1):
                torch.broadcast_shapes(x.shape(c), v.shape(c))
            cands.append(v)
        except RuntimeError:
            pass
    if cands and b.boolean(0.75):
        return b.pick(cands)
    # a fresh input: a suffix of x's shape, some dims 1
    nd = x.ndim
    keep = b.draw(st.integers(0, nd))
    ones = {i for i in range(keep) if b.boolean(0.25)}
    shape = tuple(tuple(1 if i in ones else d for i, d in enumerate(x.shape(c)[nd - keep:]))
                  for c in (0, 1))
    dt = b.pick([dt for dt in DTYPES if pred(Val("", (torch.empty(0, dtype=dt, device="meta"),) * 2,
                                                   True, 1, 0))] or [F32])
    return b.new_input(dt, shape)


def op_binary(b: Builder) -> Val:
    x = b.pick(b.pool(lambda v: v.dtype != BOOL) or b.pool())
    kind = b.pick(["add", "sub", "mul", "maximum", "minimum", "div", "where", "scalar_mul"])
    if x.dtype == BOOL and kind not in ("where",):
        kind = "where"
    if kind == "scalar_mul":
        c = b.pick([2, 3, -1]) if not is_float(x.dtype) else b.pick([2.0, 0.75, -1.0])
        return b.add(f"{x.name} * {c}", {x.name: x}, x.exact, x.bound * abs(c),
                     x.denom + (2 if c == 0.75 else 0))
    if kind == "where":
        cond = b.pick(b.pool(lambda v: v.dtype == BOOL) or [None])
        if cond is None:
            cond = op_compare(b)
        y = _second(b, x)
        env = {x.name: x, y.name: y, cond.name: cond}
        return b.add(f"torch.where({cond.name}, {x.name}, {y.name})", env, x.exact and y.exact,
                     max(x.bound, y.bound), max(x.denom, y.denom))
    y = _second(b, x, lambda v: v.dtype != BOOL)
    env = {x.name: x, y.name: y}
    ex = x.exact and y.exact
    if kind in ("add", "sub"):
        op = "+" if kind == "add" else "-"
        return b.add(f"{x.name} {op} {y.name}", env, ex, x.bound + y.bound, max(x.denom, y.denom))
    if kind == "mul":
        return b.add(f"{x.name} * {y.name}", env, ex, x.bound * y.bound, x.denom + y.denom)
    if kind in ("maximum", "minimum"):
        return b.add(f"torch.{kind}({x.name}, {y.name})", env, ex, max(x.bound, y.bound),
                     max(x.denom, y.denom))
    # true division by something >= 1 in magnitude
    return b.add(f"{x.name} / ({y.name}.abs() + 1)", env, False, x.bound)


def op_compare(b: Builder) -> Val:
    x = b.pick(b.pool())
    op = b.pick(["<", "<=", ">", ">=", "==", "!="])
    if x.exact:
        if b.boolean(0.5):
            y = _second(b, x, lambda v: v.exact)
            if not y.exact:
                raise Reject("inexact")
            return b.add(f"{x.name} {op} {y.name}", {x.name: x, y.name: y}, True, 1)
        c = b.pick([0, 1, 0.5, -1]) if x.dtype != BOOL else b.pick([0, 1])
        return b.add(f"{x.name} {op} {c}", {x.name: x}, True, 1)
    if x.lowp or not is_float(x.dtype):
        raise Reject("inexact low precision value")
    if op in ("==", "!="):
        op = "<"
    # an fp32 value compared with a constant far from anything computed exactly
    scope = {x.name: dataclasses.replace(x, exact=True)}
    v = b.add(f"{x.name} {op} {b.pick(ODD)}", scope, True, 1)
    return v


def op_int(b: Builder) -> Val:
    x = b.pick(b.pool(lambda v: v.exact and (not is_float(v.dtype) or v.denom <= 2)) or [None])
    if x is None:
        raise Reject("no exact operand")
    kind = b.pick(["bitand", "bitor", "bitxor", "not", "floordiv", "mod", "floordiv_t", "mod_t",
                   "add", "mul", "logical"])
    env = {x.name: x}
    if kind in ("bitand", "bitor", "bitxor"):
        if is_float(x.dtype):
            raise Reject("bitwise on float")
        y = _second(b, x, lambda v: v.dtype in INTS + (BOOL,))
        if is_float(y.dtype):
            raise Reject("bitwise on float")
        op = {"bitand": "&", "bitor": "|", "bitxor": "^"}[kind]
        env[y.name] = y
        # two's complement: a & b, a | b, a ^ b stay within 2 * max bound
        bd = 2 * max(x.bound, y.bound) + 1 if not (x.dtype == BOOL and y.dtype == BOOL) else 1
        return b.add(f"{x.name} {op} {y.name}", env, True, bd)
    if kind == "not":
        return b.add(f"torch.logical_not({x.name})", env, True, 1)
    if kind == "logical":
        y = _second(b, x, lambda v: v.exact)
        if not y.exact:
            raise Reject("inexact")
        env[y.name] = y
        f = b.pick(["logical_and", "logical_or", "logical_xor"])
        return b.add(f"torch.{f}({x.name}, {y.name})", env, True, 1)
    if x.dtype == BOOL:
        raise Reject("arith on bool")
    if kind in ("floordiv", "mod"):
        c = b.pick([2, 3, -3, 5])
        if kind == "floordiv":
            return b.add(f"{x.name} // {c}", env, True, x.bound / 2 + 1, 0)
        return b.add(f"{x.name} % {c}", env, True, abs(c), x.denom)
    if kind in ("floordiv_t", "mod_t"):
        y = _second(b, x, lambda v: v.exact and v.dtype in INTS)
        if y.dtype not in INTS:
            raise Reject("divisor")
        env[y.name] = y
        div = f"({y.name} % 4 + 1)" if b.boolean() else f"-({y.name} % 3 + 1)"
        if kind == "floordiv_t":
            return b.add(f"{x.name} // {div}", env, True, x.bound + 1, 0)
        return b.add(f"{x.name} % {div}", env, True, 4, x.denom)
    y = _second(b, x, lambda v: v.exact and v.dtype in INTS)
    env[y.name] = y
    if kind == "add":
        return b.add(f"{x.name} + {y.name}", env, True, x.bound + y.bound, max(x.denom, y.denom))
    return b.add(f"{x.name} * {y.name}", env, True, x.bound * y.bound, x.denom + y.denom)


def op_cast(b: Builder) -> Val:
    x = b.pick(b.pool())
    dt = b.pick([d for d in DTYPES if d != x.dtype])
    env = {x.name: x}
    if not is_float(dt) and is_float(x.dtype):
        if not x.exact or not x.finite:
            raise Reject("float -> int/bool of an inexact value")
        if dt != BOOL and x.bound >= 2 ** 31:
            raise Reject("range")
        return b.add(f"{x.name}.to({NAMES[dt]})", env, True, 1 if dt == BOOL else math.floor(x.bound), 0)
    if is_float(dt) and not is_float(x.dtype):
        if not representable(x.bound, 0, dt):
            raise Reject("int -> float would round")  # eager may round twice (via float)
        return b.add(f"{x.name}.to({NAMES[dt]})", env, True, x.bound, 0)
    if dt in INTS and x.dtype in INTS and x.bound > IMAX[dt]:
        raise Reject("narrowing")
    if dt == BOOL:
        return b.add(f"{x.name}.to(torch.bool)", env, True, 1, 0)
    if is_float(dt) and x.bound > FMAX[dt] / 10:
        raise Reject("overflow")
    return b.add(f"{x.name}.to({NAMES[dt]})", env, x.exact, x.bound, x.denom)


def op_view(b: Builder) -> Val:
    x = b.pick(b.pool())
    nd = x.ndim
    env = {x.name: x}
    kind = b.pick(["transpose", "permute", "expand", "slice", "flatten", "reshape", "unsqueeze",
                   "unflatten", "select", "t", "contiguous"])
    n = x.name
    if kind == "transpose" and nd >= 2:
        d0, d1 = b.draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=2, unique=True))
        e = f"{n}.transpose({d0}, {d1})"
    elif kind == "t" and nd == 2:
        e = f"{n}.t()"
    elif kind == "permute" and nd >= 2:
        e = f"{n}.permute({', '.join(map(str, b.draw(st.permutations(range(nd)))))})"
    elif kind == "expand":
        ones = [i for i in range(nd) if x.shape(0)[i] == 1 and x.shape(1)[i] == 1]
        s = b.sizes[b.draw(st.integers(0, len(b.sizes) - 1))]
        if ones and b.boolean():
            d = b.pick(ones)
            e = f"{n}.expand({', '.join('-1' if i != d else '__S__' for i in range(nd))})"
        else:
            e = f"{n}.expand(__S__, {', '.join(['-1'] * nd)})".replace(", )", ")")
        # the new size is a size variable: write it as one of the arguments' sizes
        src = _size_expr(b, s)
        if src is None:
            raise Reject("no size source")
        e = e.replace("__S__", src[0])
        env.update(src[1])
    elif kind == "slice" and nd >= 1:
        d = b.draw(st.integers(0, nd - 1))
        start, step = b.pick([0, 1, 2]), b.pick([1, 2, 3])
        e = f"{n}[{':, ' * d}{start}::{step}]"
    elif kind == "flatten" and nd >= 2:
        d = b.draw(st.integers(0, nd - 2))
        e = f"{n}.flatten({d}, {d + 1})"
    elif kind == "reshape":
        e = f"{n}.reshape(-1)" if b.boolean() or nd < 2 else f"{n}.reshape({n}.shape[0], -1)"
    elif kind == "unsqueeze":
        e = f"{n}.unsqueeze({b.draw(st.integers(-nd - 1, nd))})"
    elif kind == "unflatten" and nd >= 1:
        d = b.draw(st.integers(0, nd - 1))
        k = b.pick([2, 3])
        if any(x.shape(c)[d] % k or x.shape(c)[d] == 0 for c in (0, 1)):
            raise Reject("not divisible")
        e = f"{n}.unflatten({d}, ({k}, -1))"
    elif kind == "select" and nd >= 1:
        d = b.draw(st.integers(0, nd - 1))
        if any(x.shape(c)[d] == 0 for c in (0, 1)):
            raise Reject("empty")
        e = f"{n}.select({d}, {b.pick([0, -1])})"
    elif kind == "contiguous":
        e = f"{n}.contiguous()"
    else:
        raise Reject("view")
    return b.add(e, env, x.exact, x.bound, x.denom, lowp=x.lowp, finite=x.finite)


def _size_expr(b: Builder, s: tuple[int, int]):
    """Source text giving size pair `s` at run time (e.g. `x0.shape[1]`), and its env."""
    for v in b.args:
        for i in range(v.ndim):
            if (v.shape(0)[i], v.shape(1)[i]) == s:
                return f"{v.name}.shape[{i}]", {v.name: v}
    if s[0] == s[1]:
        return str(s[0]), {}
    return None


def _reduce_dims(b: Builder, x: Val, nonempty: bool) -> Optional[tuple[str, int]]:
    """(dim argument text, max reduced numel) or None for a full reduction."""
    nd = x.ndim
    if nd == 0 or b.boolean(0.2):
        if nonempty and any(x.meta[c].numel() == 0 for c in (0, 1)):
            raise Reject("empty")
        return None, max(x.meta[c].numel() for c in (0, 1))
    dims = sorted(b.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=min(nd, 2), unique=True)))
    n = max(math.prod(x.shape(c)[d] for d in dims) for c in (0, 1))
    if nonempty and any(math.prod(x.shape(c)[d] for d in dims) == 0 for c in (0, 1)):
        raise Reject("empty reduction")
    neg = b.boolean(0.3)
    txt = [str(d - nd) if neg else str(d) for d in dims]
    return (txt[0] if len(txt) == 1 else f"({', '.join(txt)})"), max(n, 1)


def op_reduce(b: Builder) -> Val:
    x = b.pick(b.pool())
    kind = b.pick(["sum", "mean", "amax", "amin", "argmax", "argmin", "var", "softmax",
                   "log_softmax", "logsumexp", "max_dim", "sum_all"])
    n = x.name
    env = {n: x}
    keep = b.boolean(0.35)
    kd = ", keepdim=True" if keep else ""
    fl = is_float(x.dtype)
    if kind in ("sum", "sum_all"):
        dims, cnt = _reduce_dims(b, x, False) if kind == "sum" else (None, max(x.meta[c].numel() for c in (0, 1)))
        e = f"{n}.sum()" if dims is None else f"{n}.sum({dims}{kd})"
        bound = x.bound * max(cnt, 1)
        exact = x.exact and (not fl or representable(bound, x.denom, F32))
        return b.add(e, env, exact, bound, x.denom)
    if kind in ("amax", "amin"):
        if x.dtype == BOOL:
            raise Reject("bool amax")
        dims, _ = _reduce_dims(b, x, True)
        e = f"{n}.{kind}()" if dims is None else f"{n}.{kind}({dims}{kd})"
        return b.add(e, env, x.exact, x.bound, x.denom)
    if kind in ("argmax", "argmin", "max_dim"):
        if not x.exact or not x.finite or x.dtype == BOOL or x.ndim == 0:
            raise Reject("argmax of inexact")
        d = b.draw(st.integers(0, x.ndim - 1))
        if any(x.shape(c)[d] == 0 for c in (0, 1)):
            raise Reject("empty")
        if kind == "max_dim":
            part = b.pick(["values", "indices"])
            f = b.pick(["max", "min"])
            return b.add(f"torch.{f}({n}, {d}{kd}).{part}", env, True, x.bound, x.denom)
        return b.add(f"{n}.{kind}({d}{kd})", env, True, max(x.shape(0)[d], x.shape(1)[d]), 0)
    if not fl:
        raise Reject("float reduction of int")
    if kind == "mean":
        dims, cnt = _reduce_dims(b, x, False)
        e = f"{n}.mean()" if dims is None else f"{n}.mean({dims}{kd})"
        return b.add(e, env, False, x.bound, finite=x.finite and _nonempty_reduce(x, dims))
    if kind == "var":
        dims, cnt = _reduce_dims(b, x, False)
        corr = b.pick([0, 1])
        e = f"{n}.var(correction={corr})" if dims is None else f"{n}.var({dims}, correction={corr}{kd})"
        return b.add(e, env, False, 4 * x.bound ** 2, finite=False)
    d = b.draw(st.integers(-1, max(x.ndim - 1, 0))) if x.ndim else 0
    if kind == "softmax":
        return b.add(f"torch.softmax({n}, {d})", env, False, 1.0)
    if kind == "log_softmax":
        sz = max(x.shape(c)[d] for c in (0, 1)) if x.ndim else 1
        return b.add(f"torch.log_softmax({n}, {d})", env, False, 2 * x.bound + math.log(max(sz, 1)) + 1)
    # logsumexp
    if x.ndim and any(x.shape(c)[d] == 0 for c in (0, 1)):
        raise Reject("logsumexp of empty")
    sz = max(x.shape(c)[d] for c in (0, 1)) if x.ndim else 1
    return b.add(f"torch.logsumexp({n}, {d}{kd})", env, False, x.bound + math.log(max(sz, 1)) + 1)


def _nonempty_reduce(x: Val, dims) -> bool:
    """Every reduced row has at least one element (else mean is NaN), for both calls."""
    for c in (0, 1):
        shape = x.shape(c)
        if dims is None:
            if math.prod(shape) == 0:
                return False
            continue
        ds = eval(dims) if isinstance(dims, str) else dims
        ds = ds if isinstance(ds, tuple) else (ds,)
        if any(shape[d] == 0 for d in ds):
            return False
    return True


def op_scan(b: Builder) -> Val:
    x = b.pick(b.pool(lambda v: v.ndim > 0) or [None])
    if x is None:
        raise Reject("no tensor")
    d = b.draw(st.integers(-x.ndim, x.ndim - 1))
    n = max(x.shape(c)[d] for c in (0, 1))
    env = {x.name: x}
    if b.boolean(0.6):
        return b.add(f"torch.cumsum({x.name}, {d})", env, x.exact, x.bound * max(n, 1), x.denom)
    # cumprod of small values
    if is_float(x.dtype):
        e = f"torch.cumprod(torch.tanh({x.name}) * 1.25, {d})" if x.bound > 1.25 else f"torch.cumprod({x.name}, {d})"
        # 1.25 ** n overflows a float from n ~ 3200 (a 32768-long row): no bound then
        return b.add(e, env, False, math.inf if n > 3000 else 1.25 ** max(n, 1))
    # in log space: a float bound to a large power overflows before it can be compared
    if x.bound > 1 and max(n, 1) * math.log2(x.bound) > 30:
        e = f"torch.cumprod({x.name}.clamp(-1, 1), {d})" if x.dtype != BOOL else f"torch.cumprod({x.name}, {d})"
        return b.add(e, env, True, 1, 0)
    return b.add(f"torch.cumprod({x.name}, {d})", env, True, x.bound ** max(n, 1), 0)


def op_index(b: Builder) -> Val:
    x = b.pick(b.pool(lambda v: v.ndim > 0) or [None])
    if x is None:
        raise Reject("no tensor")
    kind = b.pick(["gather", "index_select", "embedding", "getitem", "cat"])
    d = b.draw(st.integers(0, x.ndim - 1))
    hi = (x.shape(0)[d], x.shape(1)[d])
    env = {x.name: x}

    def length() -> tuple[int, int]:
        if 0 in hi:
            return hi
        return b.size_pair() if b.boolean() else (b.pick([1, 3, 5]),) * 2

    if kind == "cat":
        other = [v for v in b.pool() if v is not x and v.ndim == x.ndim and all(
            v.shape(c)[i] == x.shape(c)[i] for c in (0, 1) for i in range(x.ndim) if i != d)]
        y = b.pick(other) if other and b.boolean() else None
        if y is None:
            env2 = dict(env)
            e = f"torch.cat([{x.name}, {x.name}[{':, ' * d}::2]], {d})"
            return b.add(e, env2, x.exact, x.bound, x.denom)
        env[y.name] = y
        return b.add(f"torch.cat([{x.name}, {y.name}], {d})", env, x.exact and y.exact,
                     max(x.bound, y.bound), max(x.denom, y.denom))
    if kind == "gather":
        L = length()
        shape = tuple(tuple(L[c] if i == d else s for i, s in enumerate(x.shape(c))) for c in (0, 1))
        if any(L[c] > 0 and hi[c] == 0 for c in (0, 1)):
            raise Reject("index into empty")
        idx = b.new_input(I64, shape, kind="index", hi=hi, layout=False)
        env[idx.name] = idx
        return b.add(f"torch.gather({x.name}, {d}, {idx.name})", env, x.exact, x.bound, x.denom)
    if kind in ("index_select", "getitem"):
        L = length()
        if any(L[c] > 0 and hi[c] == 0 for c in (0, 1)):
            raise Reject("index into empty")
        idx = b.new_input(I64, ((L[0],), (L[1],)), kind="index", hi=hi, layout=False)
        env[idx.name] = idx
        e = f"{x.name}.index_select({d}, {idx.name})" if kind == "index_select" else \
            f"{x.name}[{':, ' * d}{idx.name}]"
        return b.add(e, env, x.exact, x.bound, x.denom)
    # embedding: x as a 2-D float weight
    if x.ndim != 2 or not is_float(x.dtype):
        raise Reject("embedding weight")
    hi = (x.shape(0)[0], x.shape(1)[0])
    shape = b.random_shape()
    if any(math.prod(shape[c]) > 0 and hi[c] == 0 for c in (0, 1)):
        raise Reject("index into empty")
    idx = b.new_input(I64, shape, kind="index", hi=hi, layout=False)
    env[idx.name] = idx
    return b.add(f"torch.nn.functional.embedding({idx.name}, {x.name})", env, x.exact, x.bound, x.denom)


OPS = [(op_unary_float, 4), (op_binary, 5), (op_compare, 2), (op_int, 3), (op_cast, 2),
       (op_view, 3), (op_reduce, 4), (op_scan, 1), (op_index, 2)]


@st.composite
def programs(draw, max_steps: int = 8, ops=None) -> Program:
    dyn = draw(st.sampled_from([False, False, True, None]))
    b = Builder(draw, dynamic=dyn is not False)
    for _ in range(draw(st.integers(1, 3))):
        b.sizes.append(b.size_pair())
    for _ in range(draw(st.integers(1, 3))):
        dt = draw(st.sampled_from([F32, F32, F32, F16, BF16, I32, I64, BOOL]))
        b.new_input(dt, b.random_shape())
    table = ops or OPS
    choices = [f for f, w in table for _ in range(w)]
    steps = draw(st.integers(max(1, max_steps // 2), max_steps))
    tries = 0
    while len(b.vals) < steps and tries < 6 * steps:
        tries += 1
        op = draw(st.sampled_from(choices))
        try:
            op(b)
        except Reject:
            pass
    if not b.vals:
        b.add(f"{b.args[0].name} + 0" if b.args[0].dtype != BOOL else f"~{b.args[0].name}",
              {b.args[0].name: b.args[0]}, b.args[0].exact, b.args[0].bound, b.args[0].denom)
    # outputs: the last value and up to two other values nothing else uses
    used = {n for line in b.lines for n in re.findall(r"\b[vx]\d+\b", line.split(" = ", 1)[1])}
    outs = [b.vals[-1]] + [v for v in b.vals[:-1] if v.name not in used][-2:]
    args = ", ".join(v.name for v in b.args)
    src = "\n".join([f"def fn({args}):", *b.lines, f"    return {', '.join(v.name for v in outs)},"])
    # exact_outputs: int/bool always; floats when exact and finite-or-exact
    return Program(src + "\n", b.inputs, dyn, draw(st.integers(0, 2 ** 20)),
                   [v.exact for v in outs], calls=1 if dyn is False else 2)


# ----------------------------------------------------------------------------- running

class Mismatch(AssertionError):
    """The compiled program disagrees with eager, or a launch broke the spec."""


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def unsupported_reason(error: BaseException) -> Optional[str]:
    """A one-line reason if `error` is a clear 'unsupported construct' error, else None."""
    try:
        from gxusim.emulator import Unsupported
    except ImportError:  # pragma: no cover
        Unsupported = NotImplementedError
    for e in _chain(error):
        if isinstance(e, (NotImplementedError, Unsupported)):
            return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        report = getattr(e, "report", None)
        findings = getattr(report, "findings", None)
        if findings is not None:
            errors = [f for f in findings if f.severity == "error"]
            if errors and all(f.kind == "unsupported" for f in errors):
                return f"emulator unsupported: {errors[0].message.splitlines()[0][:160]}"
    # raised in a compile worker: only the text survives
    m = re.search(r"\b(NotImplementedError|Unsupported): (gxusim[^\n]*)", str(error))
    if m:
        return f"{m.group(1)}: {m.group(2)[:160]}"
    return None


def _to64(t: Any) -> Any:
    return t.to(F64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def compare(actual: torch.Tensor, expected: torch.Tensor, ref64: torch.Tensor, exact: bool,
            tol_dtype: torch.dtype, scale: float, what: str, device: Optional[str] = "gxu") -> None:
    """Raise Mismatch unless `actual` agrees with `expected` (see the package docstring);
    `device`: the device type `actual` must be on (None: already moved, not checked)."""
    if not isinstance(actual, torch.Tensor):
        raise Mismatch(f"{what}: compiled returned {type(actual).__name__}")
    if device is not None and actual.device.type != device:
        raise Mismatch(f"{what}: compiled result on {actual.device}, not {device}")
    actual = actual.cpu()
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise Mismatch(f"{what}: compiled {tuple(actual.shape)} {actual.dtype}, eager "
                       f"{tuple(expected.shape)} {expected.dtype}")
    if not expected.is_floating_point() or exact:
        try:
            torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
        except AssertionError as e:
            raise Mismatch(f"{what} (must match exactly): {e}") from None
        return
    a, e, r = actual.to(F64), expected.to(F64), ref64.to(F64)
    nan_a, nan_e = a.isnan(), e.isnan()
    if not torch.equal(nan_a, nan_e):
        raise Mismatch(f"{what}: NaN positions differ: compiled {nan_a.sum()} eager {nan_e.sum()} "
                       f"(first differing at {(nan_a != nan_e).nonzero()[0].tolist()})")
    inf_e = e.isinf()
    if not torch.equal(a.isinf(), inf_e) or not torch.equal(a[inf_e], e[inf_e]):
        raise Mismatch(f"{what}: inf positions differ")
    fin = e.isfinite()
    r = torch.where(r.isfinite(), r, e)
    a, e, r = a[fin], e[fin], r[fin]
    if a.numel() == 0:
        return
    err_e = (e - r).abs().max().item()
    eps = EPS[tol_dtype]
    allow = 3 * err_e + 4 * eps * r.abs() + 4 * eps * scale
    err_a = (a - r).abs()
    bad = err_a > allow
    if bad.any():
        i = int(bad.nonzero()[0])
        raise Mismatch(f"{what}: {int(bad.sum())}/{a.numel()} elements off: e.g. compiled "
                       f"{a[i].item()!r} eager {e[i].item()!r} float64 {r[i].item()!r} (allowed "
                       f"|compiled - float64| <= {allow[i].item():.3g}; eager's worst error "
                       f"{err_e:.3g})")


def check_launches(what: str) -> int:
    import gxusim
    spec = gxusim.current_spec()
    launches = gxusim.launches()
    for launch in launches:
        programs_ = math.prod(launch.grid)
        errors = [str(f) for f in launch.findings if f.severity == "error"]
        if programs_ > spec.max_grid or launch.num_warps > spec.max_num_warps or errors:
            raise Mismatch(f"{what}: launch outside the spec {spec.name}: {launch.describe()} "
                           f"findings {errors}")
    return len(launches)


def tolerance_dtype(prog: Program) -> torch.dtype:
    """The lowest float precision the program involves (its ulps set the tolerance)."""
    dtypes = [s.dtype for s in prog.inputs] + [
        dt for dt in FLOATS if NAMES[dt] in prog.source]
    low = [dt for dt in (BF16, F16) if dt in dtypes]
    return low[0] if low else F32


def value_scale(cpu_inputs, ref64) -> float:
    """The largest finite magnitude among the inputs and the float64 results (at least 1)."""
    return max([t.abs().max().item() for t in map(_to64, list(cpu_inputs) + list(ref64))
                if t.is_floating_point() and t.numel() and t.isfinite().all()] + [1.0])


def stock_inductor_outputs(prog: Program, call: int) -> list:
    """The program compiled by stock Inductor for the CPU, on the same inputs (a compile of
    its own: gxu's compiled function stays cached). Where Inductor's semantics part from
    eager's, gxu follows Inductor: a bf16 tensor compared with a 0-dim fp32 tensor is compared
    in fp32 (eager rounds the scalar to bf16 first), which can flip a bool, and everything
    computed from it, exactly as stock Inductor does."""
    fn = torch.compile(prog.fn(), dynamic=prog.dynamic, fullgraph=True)
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t
            for t in fn(*prog.make_inputs(call, "cpu"))]


def follows_stock_inductor(actual: Any, prog: Program, call: int, output: int,
                           cache: dict) -> bool:
    """Whether an output that differs from eager is stock Inductor's: bit for bit where the
    output is exact, else within torch's default tolerances for its dtype with NaNs in the
    same places (Inductor's var of one element is 0 even of a NaN, where eager's is NaN)."""
    if not isinstance(actual, torch.Tensor):
        return False
    if call not in cache:
        try:
            cache[call] = stock_inductor_outputs(prog, call)
        except Exception:  # noqa: BLE001 - stock Inductor fails too: no second opinion
            cache[call] = None
    stock = cache[call]
    if stock is None or output >= len(stock):
        return False
    theirs, ours = stock[output], actual.detach().cpu()
    if theirs.shape != ours.shape or theirs.dtype != ours.dtype:
        return False
    if prog.exact_outputs[output] or not ours.is_floating_point():
        return torch.equal(_bit_pattern(theirs), _bit_pattern(ours))
    try:
        torch.testing.assert_close(ours, theirs, equal_nan=True)
    except AssertionError:
        return False
    return True


def _bit_pattern(tensor: torch.Tensor) -> torch.Tensor:
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(tensor.element_size())
    return tensor.view(integer) if tensor.is_floating_point() and integer else tensor


def run_program(prog: Program) -> tuple[str, str]:
    """Compile and compare; returns ("ok", "") or ("unsupported", reason); raises Mismatch
    on a wrong answer and any other exception on a crash. ("eager", msg) if eager rejects."""
    import gxusim
    torch._dynamo.reset()
    fn, fn64 = prog.fn(), prog.fn({F32: F64, F16: F64, BF16: F64})
    compiled = torch.compile(fn, dynamic=prog.dynamic, fullgraph=True)
    tol_dtype = tolerance_dtype(prog)
    stock: dict = {}  # stock Inductor's outputs per call, made only when eager disagrees
    for call in range(prog.calls):
        cpu_inputs = prog.make_inputs(call, "cpu")
        try:
            expected = fn(*cpu_inputs)
            ref64 = fn64(*[_to64(t) for t in cpu_inputs])
        except Exception as e:
            return "eager", f"{type(e).__name__}: {e}"
        scale = value_scale(cpu_inputs, ref64)
        gxu_inputs = prog.make_inputs(call, "gxu")
        gxusim.clear_launches()
        try:
            actual = compiled(*gxu_inputs)
        except Exception as e:
            reason = unsupported_reason(e)
            if reason is not None:
                return "unsupported", reason
            raise
        check_launches(f"call {call}")
        if len(actual) != len(expected):
            raise Mismatch(f"call {call}: {len(actual)} outputs, eager {len(expected)}")
        for k, (a, e, r) in enumerate(zip(actual, expected, ref64)):
            try:
                compare(a, e, r, prog.exact_outputs[k], tol_dtype, scale,
                        f"call {call} ({'A' if call == 0 else 'B'} sizes) output {k}")
            except Mismatch:
                if not follows_stock_inductor(a, prog, call, k, stock):
                    raise
    return "ok", ""


def failure_record(prog: Program, error: BaseException) -> dict:
    return {"program": prog.to_json(), "describe": prog.describe(),
            "error_type": type(error).__name__, "error": str(error)[:3000],
            "traceback": "".join(traceback.format_exception(error))[-4000:]}
