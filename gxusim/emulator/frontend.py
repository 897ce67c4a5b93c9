"""Front end: a Triton kernel's Python source -> a small typed IR of block operations.

The kernel's AST is interpreted abstractly once per specialisation: constexprs and
Python arithmetic on them are folded, every runtime value becomes a `Val` with a static
shape (block dims are constexprs) and a Triton dtype, and side effects become statements
(`Store`, `Loop`, `If`, `Reduce`, `PhiSet`, `Return`). Calls to other `@triton.jit`
functions (user helpers, Inductor's `triton_helpers`, combine functions of `tl.reduce`)
are inlined. Anything outside the supported subset raises `Unsupported` naming the
construct and the kernel source line; the emulator never guesses.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import hashlib
import inspect
import itertools
import math
import re
import textwrap
from typing import Any, Callable, Optional

import triton.language as tl
from triton.runtime.jit import JITFunction

from . import dtypes as D


class Unsupported(Exception):
    """A construct the emulator cannot run exactly; names it and the kernel source line."""

    def __init__(self, what: str, where: str = ""):
        self.what = what
        self.where = where
        super().__init__(f"{what}" + (f" at {where}" if where else ""))


_ids = itertools.count()


@dataclasses.dataclass(eq=False)
class Val:
    """A runtime value: scalar (shape ()) or block. `op` says how it is produced."""
    op: str  # arg pid nprog const arange view ew load phi loopvar param red
    shape: tuple
    dtype: str
    args: tuple = ()
    attrs: dict = dataclasses.field(default_factory=dict)
    deps: frozenset = frozenset()  # 'pid' and loop-variable ids it depends on (tile-loop detection)
    id: int = dataclasses.field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"Val#{self.id}({self.op}, {self.shape}, {self.dtype})"


@dataclasses.dataclass(eq=False)
class Store:
    base: str
    elem: str
    offset: Val
    value: Val
    mask: Optional[Val]
    shape: tuple
    site: int
    atomic_add: bool = False  # tl.atomic_add: read-modify-write, exempt from conflict checks


@dataclasses.dataclass(eq=False)
class PhiSet:
    phi: Val
    src: Val


@dataclasses.dataclass(eq=False)
class Loop:
    var: Val
    start: Val
    stop: Val
    step: Val
    body: list
    counts_tiles: bool = False
    name: str = ""


@dataclasses.dataclass(eq=False)
class If:
    cond: Val
    then: list
    orelse: list


@dataclasses.dataclass(eq=False)
class Return:
    pass


@dataclasses.dataclass(eq=False)
class Reduce:
    inputs: list
    axes: tuple
    params: list  # accumulator params then incoming params, shape ()
    body: list  # combine statements on the params
    results: list  # combine results (shape ())
    outputs: list  # Val('red') per input
    scan: bool = False  # associative scan: outputs keep the input's shape (one prefix each)
    reverse: bool = False  # scan from the last element of the axis to the first


@dataclasses.dataclass
class Site:
    kind: str  # "load" | "store"
    base: str
    elem: str
    shape: tuple
    where: str


@dataclasses.dataclass
class KernelIR:
    name: str
    body: list
    arg_names: list
    pointers: dict  # arg name -> element dtype
    scalars: dict  # arg name -> dtype
    sites: list
    stored: set
    loaded: set
    atomic: set  # bases written by tl.atomic_add (accumulated, so coverage is not required)
    sources: list  # source texts of the kernel and everything inlined (for cache keys)


class _AtomicResult:
    """What tl.atomic_add returns: the old values, which the emulator does not provide."""

    def __init__(self, builder: Any) -> None:
        self.builder = builder

    def __repr__(self) -> str:
        return "the result of tl.atomic_add (old values are not emulated)"


@dataclasses.dataclass(frozen=True)
class Ptr:
    base: str
    elem: str
    offset: Any  # Val or 0


@dataclasses.dataclass(frozen=True)
class _Method:
    obj: Val
    name: str


class _Undefined:
    def __init__(self, name: str, why: str):
        self.name, self.why = name, why


class _Ret(Exception):
    def __init__(self, value: Any):
        self.value = value


def _is_num(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) and not isinstance(x, Val)


def _unwrap(x: Any) -> Any:
    return x.value if isinstance(x, tl.constexpr) else x


def broadcast_shapes(*shapes: tuple) -> tuple:
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


def _dt_name(x: Any) -> str:
    x = _unwrap(x)
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
# float result of the input's float type; "pred": int1 result; "same": input dtype.
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
    "fmod": ("math.fmod({0}, {1})", "float"), "copysign": ("math.copysign({0}, {1})", "float"),
    "hypot": ("math.hypot({0}, {1})", "float"), "div_rn": ("({0} / {1})", "float"),
    "fdiv": ("({0} / {1})", "float"), "div": ("({0} / {1})", "float"),
    "fma": ("(np.float64({0}) * {1} + {2})", "float"),
    "fmax": ("_maxp({0}, {1})", "float"), "fmin": ("_minp({0}, {1})", "float"),
}

_BINOPS: dict[type, str] = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
    ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor", ast.LShift: "lshift",
    ast.RShift: "rshift",
}
_CMPOPS: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
                            ast.Eq: "==", ast.NotEq: "!="}
# binary op -> (template for ints, template for floats); None: not defined for that kind
_BIN_TEMPLATES: dict[str, tuple[Optional[str], Optional[str]]] = {
    "add": ("({0} + {1})",) * 2, "sub": ("({0} - {1})",) * 2, "mul": ("({0} * {1})",) * 2,
    "truediv": (None, "({0} / {1})"), "floordiv": ("_idiv({0}, {1})", "_ffloordiv({0}, {1})"),
    "mod": ("_irem({0}, {1})", "math.fmod({0}, {1})"), "and": ("({0} & {1})", None),
    "or": ("({0} | {1})", None), "xor": ("({0} ^ {1})", None),
    "lshift": ("({0} << {1})", None), "rshift": ("({0} >> {1})", None),
}
_PY_BINOPS: dict[str, Callable] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b, "rshift": lambda a, b: a >> b,
}
_PY_CMP: dict[str, Callable] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}
def _sum_dtype(dtype: str) -> str:
    """Triton's accumulation type for sums and products: small integers widen to 32 bits."""
    if dtype == D.BOOL or dtype in D.SIGNED and D.bits(dtype) < 32:
        return "int32"
    return "uint32" if dtype in D.UNSIGNED and D.bits(dtype) < 32 else dtype


# Triton library functions the emulator refuses where the kernel calls them (their
# implementations would otherwise be inlined and fail deep inside Triton's own source).
_UNSUPPORTED_TL = {
    **dict.fromkeys(("sort", "topk", "flip", "histogram", "gather"), "sorts and permutations"),
    **dict.fromkeys(("dot", "dot_scaled"), "matrix products"),
    **dict.fromkeys(("rand", "randn", "randint", "randint4x"), "random numbers"),
}
_IGNORED_TL = {"static_assert", "device_assert", "static_print", "device_print", "debug_barrier",
               "assume"}
_IDENTITY_TL = {"multiple_of", "max_contiguous", "max_constancy"}
_LAUNCH_OPTIONS = {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                   "waves_per_eu", "matrix_instr_nonkdim", "kpack", "debug", "launch_cooperative_grid",
                   "launch_pdl"}


def _classify(f: Any) -> tuple[str, str]:
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


def _assigned_names(body: list) -> set:
    names = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _loaded_names(nodes: list, after_line: int = -1) -> set:
    names = set()
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                    and getattr(node, "lineno", 0) > after_line:
                names.add(node.id)
    return names


def kernel_source(fn: Any) -> tuple[str, Callable, str]:
    """(source from `def`, the Python function, kernel name) of a JITFunction or plain function."""
    if isinstance(fn, JITFunction):
        pyfn = fn.fn
        src = getattr(fn, "src", None) or inspect.getsource(pyfn)
    elif hasattr(fn, "fn") and isinstance(fn.fn, JITFunction):  # CachingAutotuner / Autotuner
        return kernel_source(fn.fn)
    elif inspect.isfunction(fn):
        pyfn, src = fn, inspect.getsource(fn)
    else:
        raise TypeError(f"not a Triton kernel: {fn!r}")
    src = textwrap.dedent(src)
    start = src.find("def ")
    return src[start:], pyfn, pyfn.__name__


class _Func:
    """One function being interpreted: its AST, globals and line mapping for messages."""

    def __init__(self, jit: Any):
        self.src, self.pyfn, self.name = kernel_source(jit)
        self.tree = ast.parse(self.src).body[0]
        if not isinstance(self.tree, ast.FunctionDef):
            raise Unsupported(f"{self.name} is not a function definition")
        self.globals = self.pyfn.__globals__
        self.lines = self.src.splitlines()
        try:
            file_lines, first = inspect.getsourcelines(self.pyfn)
            offset = next(i for i, text in enumerate(file_lines) if text.lstrip().startswith("def "))
            self.file_first = first + offset
        except (OSError, TypeError, StopIteration):
            self.file_first = None

    def where(self, lineno: int) -> str:
        text = self.lines[lineno - 1].strip() if 0 < lineno <= len(self.lines) else ""
        line = f"line {self.file_first + lineno - 1}" if self.file_first else f"kernel line {lineno}"
        return f"{self.name} {line}: `{text}`"


class Builder:
    """Abstract interpreter of one kernel specialisation; `build()` returns its KernelIR."""

    def __init__(self, kernel: Any, args: dict):
        """args: arg name -> ('ptr', elem dtype) | ('scalar', dtype) | ('const', value)."""
        self.func = _Func(kernel)
        self.args = args
        self.stmts: list = []
        self.sites: list[Site] = []
        self.stored: set = set()
        self.loaded: set = set()
        self.atomic: set = set()
        self.sources = [self.func.src]
        self.pids: dict = {}
        self.node: Optional[ast.AST] = None
        self.loop_stack: list = []
        self.inline_depth = 0

    # ---------------------------------------------------------------- entry
    def build(self) -> KernelIR:
        tree = self.func.tree
        env: dict = {}
        pointers, scalars = {}, {}
        params = [a.arg for a in tree.args.args]
        for name in params:
            if name not in self.args:
                raise Unsupported(f"argument {name!r} was not given")
            kind, value = self.args[name]
            if kind == "ptr":
                pointers[name] = value
                env[name] = Ptr(name, value, 0)
            elif kind == "scalar":
                scalars[name] = value
                env[name] = Val("arg", (), value, attrs={"name": name})
            else:
                env[name] = value
        self.env = env
        try:
            self.block(tree.body)
        except _Ret:
            pass
        return KernelIR(self.func.name, self.stmts, params, pointers, scalars, self.sites,
                        self.stored, self.loaded, self.atomic, self.sources)

    def here(self) -> str:
        return self.func.where(getattr(self.node, "lineno", 0))

    def fail(self, what: str) -> Unsupported:
        return Unsupported(what, self.here())

    # ---------------------------------------------------------------- values
    def emit(self, v: Val) -> Val:
        self.stmts.append(v)
        return v

    def const(self, value: Any, dtype: str, shape: tuple = ()) -> Val:
        if D.is_float(dtype):
            value = float(value)
        elif dtype == D.BOOL:
            value = bool(value)
        else:
            value = int(value)
        return Val("const", tuple(shape), dtype, attrs={"value": value})

    def as_val(self, x: Any, like: Optional[str] = None) -> Val:
        x = _unwrap(x)
        if isinstance(x, Val):
            return x
        if _is_num(x):
            dt = D.weak_scalar_dtype(x, like) if like else D.python_scalar_dtype(x)
            return self.const(x, dt)
        if isinstance(x, Ptr):
            raise self.fail("a pointer used as a value")
        raise self.fail(f"value {x!r} of type {type(x).__name__} used as a tensor")

    def ew(self, template: str, args: list, out: str, cdts: list) -> Val:
        shape = broadcast_shapes(*(a.shape for a in args))
        deps = frozenset().union(*(a.deps for a in args))
        return self.emit(Val("ew", shape, out, tuple(args), {"tmpl": template, "cdts": tuple(cdts)},
                             deps))

    def cast(self, x: Any, dtype: str) -> Val:
        v = self.as_val(x, dtype)
        if v.dtype == dtype:
            return v
        if v.op == "const":
            return self.const(v.attrs["value"], dtype, v.shape)
        return self.ew("{0}", [v], dtype, [dtype])

    def to_bool(self, x: Any) -> Val:
        return self.cast(x, D.BOOL)

    def broadcast_to(self, v: Val, shape: tuple) -> Val:
        shape = tuple(shape)
        if v.shape == shape:
            return v
        if broadcast_shapes(v.shape, shape) != shape:
            raise self.fail(f"cannot broadcast {v.shape} to {shape}")
        if v.op == "const":
            return self.const(v.attrs["value"], v.dtype, shape)
        rank = len(shape)
        return Val("view", shape, v.dtype, (v,), {"map": tuple(range(rank - len(v.shape), rank))},
                   v.deps)

    def binary(self, op: str, a: Any, b: Any) -> Any:
        a, b = _unwrap(a), _unwrap(b)
        if not isinstance(a, (Val, Ptr)) and not isinstance(b, (Val, Ptr)):
            return _PY_BINOPS[op](a, b)
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            return self.pointer_arith(op, a, b)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        va, vb = self.as_val(a, bdt), self.as_val(b, adt)
        if op in ("lshift", "rshift") or op in ("and", "or", "xor"):
            if D.is_float(adt) or D.is_float(bdt):
                raise self.fail(f"bitwise {op} on floating point")
        cdt = D.promote(adt, bdt, div=(op == "truediv"))
        int_t, float_t = _BIN_TEMPLATES[op]
        template = float_t if D.is_float(cdt) else int_t
        if template is None:
            raise self.fail(f"operator {op} on {cdt}")
        return self.ew(template, [va, vb], cdt, [cdt, cdt])

    def compare(self, op: str, a: Any, b: Any) -> Any:
        a, b = _unwrap(a), _unwrap(b)
        if not isinstance(a, Val) and not isinstance(b, Val):
            if isinstance(a, Ptr) or isinstance(b, Ptr):
                raise self.fail("pointer comparison")
            return _PY_CMP[op](a, b)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        cdt = D.promote(adt, bdt)
        return self.ew("({0} %s {1})" % op, [self.as_val(a, bdt), self.as_val(b, adt)], D.BOOL,
                       [cdt, cdt])

    def pointer_arith(self, op: str, a: Any, b: Any) -> Ptr:
        if isinstance(a, Ptr) and isinstance(b, Ptr):
            raise self.fail("arithmetic between two pointers")
        ptr, off = (a, b) if isinstance(a, Ptr) else (b, a)
        if op not in ("add", "sub") or (op == "sub" and isinstance(b, Ptr)):
            raise self.fail(f"pointer operator {op}")
        off = self.as_val(off)
        if not D.is_int(off.dtype) or off.dtype == D.BOOL:
            raise self.fail(f"pointer offset of dtype {off.dtype}")
        if op == "sub":
            off = self.binary("sub", 0, off)
        if isinstance(ptr.offset, int) and ptr.offset == 0:
            return Ptr(ptr.base, ptr.elem, off)
        return Ptr(ptr.base, ptr.elem, self.binary("add", ptr.offset, off))

    def unary(self, op: type, x: Any) -> Any:
        x = _unwrap(x)
        if not isinstance(x, Val):
            return {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v,
                    ast.Invert: lambda v: ~v}[op](x)
        if op is ast.UAdd:
            return x
        if op is ast.USub:
            return self.ew("(-{0})", [x], x.dtype, [x.dtype])
        if op is ast.Not or (op is ast.Invert and x.dtype == D.BOOL):
            return self.ew("(not {0})", [self.to_bool(x)], D.BOOL, [D.BOOL])
        if D.is_float(x.dtype):
            raise self.fail("~ on floating point")
        return self.ew("(~{0})", [x], x.dtype, [x.dtype])

    def where(self, c: Any, a: Any, b: Any) -> Val:
        c = self.to_bool(c)
        a, b = _unwrap(a), _unwrap(b)
        if not isinstance(a, Val) and not isinstance(b, Val):
            a = self.as_val(a)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        cdt = D.promote(adt, bdt)
        return self.ew("({1} if {0} else {2})", [c, self.as_val(a, bdt), self.as_val(b, adt)], cdt,
                       [D.BOOL, cdt, cdt])

    def math_call(self, name: str, args: list) -> Val:
        if name not in MATH:
            raise self.fail(f"math function {name}")
        template, kind = MATH[name]
        vals = [self.as_val(a) for a in args]
        cdt = vals[0].dtype
        for v in vals[1:]:
            cdt = D.promote(cdt, v.dtype)
        if kind == "same":
            return self.ew(template, vals, cdt, [cdt] * len(vals))
        if not D.is_float(cdt):
            if kind == "pred":
                return self.const(False, D.BOOL, broadcast_shapes(*(v.shape for v in vals)))
            cdt = "fp32"
        out = D.BOOL if kind == "pred" else cdt
        return self.ew(template, vals, out, [cdt] * len(vals))

    # ---------------------------------------------------------------- statements
    def block(self, body: list) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, node: ast.stmt) -> None:
        self.node = node
        handler = getattr(self, f"s_{type(node).__name__}", None)
        if handler is None:
            raise self.fail(f"statement {type(node).__name__}")
        handler(node)

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise self.fail("tuple unpacking of a non-tuple or of the wrong length")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
        else:
            raise self.fail(f"assignment to {type(target).__name__}")

    def s_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value)

    def s_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.expr(node.value))

    def s_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self.fail("augmented assignment to a non-name")
        current = self.lookup(node.target.id)
        self.env[node.target.id] = self.binop(type(node.op), current, self.expr(node.value))

    def s_Expr(self, node: ast.Expr) -> None:
        self.expr(node.value)

    def s_Pass(self, node: ast.Pass) -> None:
        pass

    def s_Assert(self, node: ast.Assert) -> None:
        pass  # like tl.device_assert: ignored (documented), never changes results

    def s_Return(self, node: ast.Return) -> None:
        value = self.expr(node.value) if node.value is not None else None
        raise _Ret(value)

    def s_If(self, node: ast.If) -> None:
        cond = _unwrap(self.expr(node.test))
        if not isinstance(cond, Val):
            self.block(node.body if cond else node.orelse)
            return
        if cond.shape not in ((), (1,)):
            raise self.fail("`if` on a block condition")
        cond = self.to_bool(cond)
        before = dict(self.env)
        branches = []
        for body in (node.body, node.orelse):
            self.env = dict(before)
            stmts: list = []
            returned = False
            with _Into(self, stmts):
                try:
                    self.block(body)
                except _Ret as r:
                    if self.inline_depth:
                        raise self.fail("`return` inside a runtime `if` of an inlined function")
                    if r.value is not None:
                        raise self.fail("kernel returns a value")
                    stmts.append(Return())
                    returned = True
            branches.append((stmts, self.env, returned))
        live = self.live_after(node)
        merged = dict(before)
        alive = [b for b in branches if not b[2]]
        names = set().union(*(set(b[1]) for b in alive)) if alive else set()
        for name in names:
            values = [b[1].get(name, _Undefined(name, "")) for b in alive]
            if all(v is values[0] for v in values):
                merged[name] = values[0]
                continue
            if name not in live:
                merged[name] = _Undefined(name, "assigned in a runtime `if` and not used after")
                continue
            if len(alive) == 1:
                merged[name] = values[0]
                continue
            if any(isinstance(v, _Undefined) for v in values) or \
                    any(not isinstance(_unwrap(v), (Val,)) and not _is_num(_unwrap(v)) for v in values):
                raise self.fail(f"variable {name!r} differs between the branches of a runtime `if` "
                                f"in a way the emulator cannot merge")
            vals = [self.as_val(v) for v in values]
            shape = broadcast_shapes(*(v.shape for v in vals))
            dt = vals[0].dtype
            for v in vals[1:]:
                dt = D.promote(dt, v.dtype)
            phi = Val("phi", shape, dt, deps=frozenset().union(*(v.deps for v in vals)))
            for (stmts, _, _), v in zip(alive, vals):
                with _Into(self, stmts):
                    src = self.broadcast_to(self.cast(v, dt), shape)
                    stmts.append(PhiSet(phi, src))
            merged[name] = phi
        self.env = merged
        self.stmts.append(If(cond, branches[0][0], branches[1][0]))
        if not alive:
            raise _Ret(None)

    def live_after(self, node: ast.AST) -> set:
        """Names that may be read after `node` (later lines, or anywhere in an enclosing loop)."""
        live = _loaded_names(self.func_stack_top().body, node.end_lineno)
        for loop in self.loop_stack:
            live |= _loaded_names(loop.body)
        return live

    def func_stack_top(self) -> ast.FunctionDef:
        return self.current_tree

    def s_For(self, node: ast.For) -> None:
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.fail("`for` over something other than range/tl.range/tl.static_range")
        f = self.expr(it.func)
        _, fname = _classify(f)
        if f is not builtins.range and fname not in ("range", "static_range"):
            raise self.fail(f"`for` over {ast.unparse(it.func)}")
        bounds = [_unwrap(self.expr(a)) for a in it.args]
        if not 1 <= len(bounds) <= 3:
            raise self.fail("range with a wrong number of arguments")
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds.append(1)
        if not isinstance(node.target, ast.Name) or node.orelse:
            raise self.fail("`for` with a non-name target or an `else` clause")
        if fname == "static_range" or all(not isinstance(b, Val) for b in bounds) \
                and fname == "static_range":
            if any(isinstance(b, Val) for b in bounds):
                raise self.fail("tl.static_range with runtime bounds")
            for i in range(*bounds):
                self.env[node.target.id] = i
                self.block(node.body)
            return
        self.runtime_loop(node, bounds)

    def runtime_loop(self, node: ast.For, bounds: list) -> None:
        for b in bounds:
            if isinstance(b, Val) and (b.shape != () or not D.is_int(b.dtype)):
                raise self.fail("range bounds must be integer scalars")
        vdt = "int32"
        for b in bounds:
            if isinstance(b, Val):
                vdt = D.promote(vdt, b.dtype)
            elif not -2**31 <= int(b) < 2**31:
                vdt = "int64"
        start, stop, step = (self.cast(b, vdt) for b in bounds)
        assigned = _assigned_names(node.body)
        self.loop_stack.append(node)
        live = self.live_after(node) | self._read_before_write(node.body)
        before = dict(self.env)
        overrides: dict = {}
        for _attempt in range(3):
            self.env = dict(before)
            init_stmts: list = []
            phis: dict = {}
            with _Into(self, init_stmts):
                for name in sorted(assigned & live):
                    old = _unwrap(before.get(name))
                    if not isinstance(old, Val) and not _is_num(old):
                        continue
                    init = self.as_val(old)
                    shape, dt = overrides.get(name, (init.shape, init.dtype))
                    init = self.broadcast_to(self.cast(init, dt), shape)
                    phi = Val("phi", shape, dt, deps=init.deps)
                    init_stmts.append(PhiSet(phi, init))
                    phis[name] = phi
                    self.env[name] = phi
            var = Val("loopvar", (), vdt)
            var.deps = frozenset({var.id}) | start.deps | stop.deps | step.deps
            self.env[node.target.id] = var
            body: list = []
            with _Into(self, body):
                try:
                    self.block(node.body)
                except _Ret:
                    raise self.fail("`return` directly inside a loop body")
                mismatch = {}
                for name, phi in phis.items():
                    new = _unwrap(self.env.get(name))
                    if not isinstance(new, Val) and not _is_num(new):
                        raise self.fail(f"loop-carried {name!r} becomes a non-tensor")
                    new = self.as_val(new, phi.dtype)
                    if new.dtype != phi.dtype or broadcast_shapes(new.shape, phi.shape) != phi.shape:
                        mismatch[name] = (broadcast_shapes(new.shape, phi.shape),
                                          D.promote(new.dtype, phi.dtype))
                if mismatch:
                    overrides.update(mismatch)
                    continue
                sets = []
                for name, phi in phis.items():
                    new = self.broadcast_to(self.as_val(_unwrap(self.env[name]), phi.dtype), phi.shape)
                    if new is phi:
                        continue
                    if new.op == "phi" and new in phis.values():
                        new = self.ew("{0}", [new], new.dtype, [new.dtype])  # read before any update
                    sets.append(PhiSet(phi, new))
                body.extend(sets)
            break
        else:
            raise self.fail("a loop-carried variable keeps changing type")
        self.loop_stack.pop()
        self.stmts.extend(init_stmts)
        counts = "pid" in (start.deps | stop.deps | step.deps) or _mixes_pid(body, var.id)
        self.stmts.append(Loop(var, start, stop, step, body, counts, node.target.id))
        after = dict(before)
        for name in assigned:
            after[name] = phis.get(name, _Undefined(name, "assigned inside a loop and not carried"))
        after[node.target.id] = _Undefined(node.target.id, "loop variable used after its loop")
        self.env = after

    def _read_before_write(self, body: list) -> set:
        """Names the loop body may read before assigning them (so they need a loop-carried value)."""
        written: set = set()
        read: set = set()
        for stmt in body:
            loads = _loaded_names([stmt])
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                read |= loads - written
                written |= _assigned_names([stmt])
            else:
                read |= loads - written  # control flow: conservatively everything it reads
                if isinstance(stmt, ast.AugAssign):
                    read.add(stmt.target.id) if isinstance(stmt.target, ast.Name) else None
                    written |= _assigned_names([stmt])
        return read

    # ---------------------------------------------------------------- expressions
    def lookup(self, name: str) -> Any:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, _Undefined):
                raise self.fail(f"variable {name!r} is not defined here ({value.why})")
            return value
        if name in self.func.globals:
            return _unwrap(self.func.globals[name])
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.fail(f"unknown name {name!r}")

    def binop(self, op: type, a: Any, b: Any) -> Any:
        if op not in _BINOPS:
            raise self.fail(f"operator {op.__name__}")
        return self.binary(_BINOPS[op], a, b)

    def expr(self, node: ast.expr) -> Any:
        handler = getattr(self, f"e_{type(node).__name__}", None)
        if handler is None:
            raise self.fail(f"expression {type(node).__name__}")
        return handler(node)

    def e_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def e_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id)

    def e_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expr(e) for e in node.elts)

    def e_List(self, node: ast.List) -> list:
        return [self.expr(e) for e in node.elts]

    def e_JoinedStr(self, node: ast.JoinedStr) -> str:
        return ast.unparse(node)  # only messages of asserts/prints use f-strings

    def e_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(type(node.op), self.expr(node.left), self.expr(node.right))

    def e_UnaryOp(self, node: ast.UnaryOp) -> Any:
        return self.unary(type(node.op), self.expr(node.operand))

    def e_Compare(self, node: ast.Compare) -> Any:
        if len(node.ops) != 1:
            raise self.fail("chained comparison")
        op = node.ops[0]
        left, right = self.expr(node.left), self.expr(node.comparators[0])
        if isinstance(op, (ast.Is, ast.IsNot)):
            if isinstance(left, (Val, Ptr)) or isinstance(right, (Val, Ptr)):
                raise self.fail("`is` on a tensor")
            return (left is right) == isinstance(op, ast.Is)
        if isinstance(op, (ast.In, ast.NotIn)):
            return (left in right) == isinstance(op, ast.In)
        return self.compare(_CMPOPS[type(op)], left, right)

    def e_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        result = self.expr(node.values[0])
        for value_node in node.values[1:]:
            if not isinstance(_unwrap(result), Val):
                if bool(_unwrap(result)) != is_and:
                    return result  # Python short-circuit on constants
                result = self.expr(value_node)
                continue
            other = self.expr(value_node)
            result = self.binary("and" if is_and else "or", self.to_bool(result), self.to_bool(other))
        return result

    def e_IfExp(self, node: ast.IfExp) -> Any:
        cond = _unwrap(self.expr(node.test))
        if not isinstance(cond, Val):
            return self.expr(node.body if cond else node.orelse)
        return self.where(cond, self.expr(node.body), self.expr(node.orelse))

    def e_Attribute(self, node: ast.Attribute) -> Any:
        obj = _unwrap(self.expr(node.value))
        attr = node.attr
        if isinstance(obj, Val):
            if attr == "dtype":
                return tl.core.dtype(obj.dtype)
            if attr == "shape":
                return [tl.constexpr(s) for s in obj.shape]
            if attr == "numel":
                return math.prod(obj.shape)
            if attr == "T":
                return self.tl_trans(obj)
            if hasattr(self, f"tl_{attr}"):
                return _Method(obj, attr)
            raise self.fail(f"tensor attribute .{attr}")
        if isinstance(obj, Ptr):
            if attr == "dtype":
                return tl.pointer_type(tl.core.dtype(obj.elem))
            raise self.fail(f"pointer attribute .{attr}")
        try:
            return _unwrap(getattr(obj, attr))
        except AttributeError:
            raise self.fail(f"attribute {attr!r} of {obj!r}") from None

    def e_Subscript(self, node: ast.Subscript) -> Any:
        obj = _unwrap(self.expr(node.value))
        index = node.slice
        if not isinstance(obj, Val):
            if isinstance(obj, Ptr):
                raise self.fail("subscript of a pointer")
            return obj[_unwrap(self.expr(index))]
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        src_dim = 0
        mapping, shape = [], []
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                shape.append(1)
            elif isinstance(item, ast.Slice) and item.lower is None and item.upper is None \
                    and item.step is None:
                if src_dim >= len(obj.shape):
                    raise self.fail("too many indices")
                mapping.append(len(shape))
                shape.append(obj.shape[src_dim])
                src_dim += 1
            else:
                raise self.fail(f"tensor subscript `{ast.unparse(item)}` (only `:` and `None`)")
        while src_dim < len(obj.shape):
            mapping.append(len(shape))
            shape.append(obj.shape[src_dim])
            src_dim += 1
        return self.view(obj, tuple(shape), tuple(mapping))

    def view(self, src: Val, shape: tuple, mapping: tuple) -> Val:
        """src dim k is out dim mapping[k]; out dims not mapped are new unit axes."""
        if shape == src.shape and mapping == tuple(range(len(shape))):
            return src
        if src.op == "const":
            return self.const(src.attrs["value"], src.dtype, shape)
        return Val("view", shape, src.dtype, (src,), {"map": mapping}, src.deps)

    def e_Call(self, node: ast.Call) -> Any:
        f = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.fail("*args in a call")
            args.append(self.expr(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.fail("**kwargs in a call")
            kwargs[k.arg] = self.expr(k.value)
        return self.call(f, args, kwargs)

    def call(self, f: Any, args: list, kwargs: dict) -> Any:
        if isinstance(f, _Method):
            return getattr(self, f"tl_{f.name}")(f.obj, *args, **kwargs)
        category, name = _classify(f)
        if category == "math" or (category == "tl" and name in MATH and not hasattr(self, f"tl_{name}")):
            return self.math_call(name, args)
        if category == "tl":
            if name in _UNSUPPORTED_TL:
                raise self.fail(f"tl.{name} ({_UNSUPPORTED_TL[name]} are not emulated)")
            if name in _IGNORED_TL:
                return None
            if name in _IDENTITY_TL:
                return args[0]
            handler = getattr(self, f"tl_{name}", None)
            if handler is not None:
                return handler(*args, **kwargs)
            if f is tl.constexpr:
                return args[0]
        if category == "helper" and name in _NATIVE_HELPERS:
            return _NATIVE_HELPERS[name](self, *args, **kwargs)
        if isinstance(f, JITFunction):
            return self.inline(f, args, kwargs)
        if category == "other" and callable(f) and not any(
                isinstance(_unwrap(a), (Val, Ptr)) for a in [*args, *kwargs.values()]):
            return f(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()})
        raise self.fail(f"call to {getattr(f, '__module__', '')}.{name or f!r}")

    def inline(self, f: JITFunction, args: list, kwargs: dict) -> Any:
        callee = _Func(f)
        self.sources.append(callee.src)
        params = callee.tree.args
        names = [a.arg for a in params.args]
        defaults = params.defaults
        env: dict = {}
        for i, name in enumerate(names):
            if i < len(args):
                env[name] = args[i]
            elif name in kwargs:
                env[name] = kwargs[name]
            elif i >= len(names) - len(defaults):
                env[name] = _unwrap(ast.literal_eval(defaults[i - (len(names) - len(defaults))])) \
                    if isinstance(defaults[i - (len(names) - len(defaults))], ast.Constant) else \
                    self.expr(defaults[i - (len(names) - len(defaults))])
            else:
                raise self.fail(f"missing argument {name!r} of {callee.name}")
        saved = (self.func, self.env, self.node, self.loop_stack, self.current_tree)
        self.func, self.env, self.loop_stack, self.current_tree = callee, env, [], callee.tree
        self.inline_depth += 1
        try:
            self.block(callee.tree.body)
            result = None
        except _Ret as r:
            result = r.value
        finally:
            self.inline_depth -= 1
            self.func, self.env, self.node, self.loop_stack, self.current_tree = saved
        return result

    # ---------------------------------------------------------------- triton.language
    def tl_program_id(self, axis: Any = 0) -> Val:
        axis = int(_unwrap(axis))
        key = ("pid", axis)
        if key not in self.pids:
            self.pids[key] = Val("pid", (), "int32", attrs={"axis": axis}, deps=frozenset({"pid"}))
        return self.pids[key]

    def tl_num_programs(self, axis: Any = 0) -> Val:
        axis = int(_unwrap(axis))
        key = ("nprog", axis)
        if key not in self.pids:
            self.pids[key] = Val("nprog", (), "int32", attrs={"axis": axis})
        return self.pids[key]

    def tl_arange(self, start: Any, end: Any) -> Val:
        start, end = int(_unwrap(start)), int(_unwrap(end))
        return Val("arange", (end - start,), "int32", attrs={"start": start})

    def tl_full(self, shape: Any, value: Any, dtype: Any) -> Val:
        shape = tuple(int(_unwrap(s)) for s in _unwrap(shape))
        dt = _dt_name(dtype)
        value = _unwrap(value)
        if _is_num(value):
            return self.const(value, dt, shape)
        return self.broadcast_to(self.cast(value, dt), shape)

    def tl_zeros(self, shape: Any, dtype: Any) -> Val:
        return self.tl_full(shape, 0, dtype)

    def tl_zeros_like(self, x: Val) -> Val:
        return self.const(0, x.dtype, x.shape)

    def tl_full_like(self, x: Val, value: Any, dtype: Any = None) -> Val:
        return self.tl_full(x.shape, value, dtype or x.dtype)

    def tl_cdiv(self, a: Any, b: Any) -> Any:
        return self.binary("floordiv", self.binary("sub", self.binary("add", a, b), 1), b)

    def tl_where(self, c: Any, a: Any, b: Any) -> Val:
        return self.where(c, a, b)

    def _minmax(self, fn: str, a: Any, b: Any) -> Val:
        a, b = _unwrap(a), _unwrap(b)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        cdt = D.promote(adt, bdt)
        return self.ew(f"{fn}({{0}}, {{1}})", [self.as_val(a, bdt), self.as_val(b, adt)], cdt,
                       [cdt, cdt])

    def tl_maximum(self, a: Any, b: Any, propagate_nan: Any = None) -> Val:
        return self._minmax("_maxp", a, b)

    def tl_minimum(self, a: Any, b: Any, propagate_nan: Any = None) -> Val:
        return self._minmax("_minp", a, b)

    def tl_clamp(self, x: Any, lo: Any, hi: Any, propagate_nan: Any = None) -> Val:
        return self._minmax("_minp", self._minmax("_maxp", x, lo), hi)

    def tl_abs(self, x: Any) -> Val:
        return self.math_call("abs", [x])

    def tl_fma(self, a: Any, b: Any, c: Any) -> Val:
        return self.math_call("fma", [a, b, c])

    def tl_sigmoid(self, x: Any) -> Val:
        return self.math_call("sigmoid", [x])

    def tl_to(self, x: Any, dtype: Any, fp_downcast_rounding: Any = None, bitcast: bool = False) -> Val:
        if _unwrap(bitcast):
            raise self.fail(".to(..., bitcast=True)")
        if _unwrap(fp_downcast_rounding) not in (None, "rtne"):
            raise self.fail(f"fp_downcast_rounding={_unwrap(fp_downcast_rounding)!r}")
        return self.cast(x, _dt_name(dtype))

    def tl_cast(self, x: Any, dtype: Any, fp_downcast_rounding: Any = None, bitcast: bool = False) -> Val:
        return self.tl_to(x, dtype, fp_downcast_rounding, bitcast)

    def tl_broadcast_to(self, x: Any, *shape: Any) -> Val:
        if len(shape) == 1 and isinstance(_unwrap(shape[0]), (tuple, list)):
            shape = _unwrap(shape[0])
        return self.broadcast_to(self.as_val(x), tuple(int(_unwrap(s)) for s in shape))

    def tl_broadcast(self, a: Any, b: Any) -> tuple:
        a, b = self.as_val(a), self.as_val(b)
        shape = broadcast_shapes(a.shape, b.shape)
        return self.broadcast_to(a, shape), self.broadcast_to(b, shape)

    def tl_expand_dims(self, x: Any, axis: Any) -> Val:
        x = self.as_val(x)
        axes = _unwrap(axis)
        axes = [int(_unwrap(a)) for a in (axes if isinstance(axes, (tuple, list)) else [axes])]
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
        return self.view(x, tuple(shape), tuple(mapping))

    def tl_reshape(self, x: Any, *shape: Any, can_reorder: bool = False) -> Val:
        x = self.as_val(x)
        if len(shape) == 1 and isinstance(_unwrap(shape[0]), (tuple, list)):
            shape = _unwrap(shape[0])
        shape = tuple(int(_unwrap(s)) for s in shape)
        if math.prod(shape) != math.prod(x.shape):
            raise self.fail(f"reshape {x.shape} -> {shape} changes the element count")
        src_dims = [d for d, s in enumerate(x.shape) if s != 1]
        out_dims = [d for d, s in enumerate(shape) if s != 1]
        if [x.shape[d] for d in src_dims] != [shape[d] for d in out_dims]:
            raise self.fail(f"reshape {x.shape} -> {shape} (only adding/removing unit dims)")
        mapping, it = [], iter(out_dims)
        unit_out = [d for d, s in enumerate(shape) if s == 1]
        for s in x.shape:
            mapping.append(next(it) if s != 1 else (unit_out[0] if unit_out else 0))
        return self.view(x, shape, tuple(mapping))

    tl_view = tl_reshape

    def tl_permute(self, x: Any, *dims: Any) -> Val:
        x = self.as_val(x)
        if len(dims) == 1 and isinstance(_unwrap(dims[0]), (tuple, list)):
            dims = _unwrap(dims[0])
        dims = tuple(int(_unwrap(d)) for d in dims)
        shape = tuple(x.shape[d] for d in dims)
        mapping = tuple(dims.index(k) for k in range(len(dims)))
        return self.view(x, shape, mapping)

    def tl_trans(self, x: Any, *dims: Any) -> Val:
        x = self.as_val(x)
        if not dims or (len(dims) == 1 and _unwrap(dims[0]) is None):
            dims = tuple(reversed(range(len(x.shape))))
        return self.tl_permute(x, *dims)

    def tl_load(self, pointer: Any, mask: Any = None, other: Any = None, boundary_check: Any = (),
                padding_option: Any = "", cache_modifier: Any = "", eviction_policy: Any = "",
                volatile: Any = False) -> Val:
        if not isinstance(pointer, Ptr):
            raise self.fail("tl.load of something other than argument pointer + offsets "
                            "(block pointers and tensor descriptors are not supported)")
        offset = self.as_val(pointer.offset)
        mask = _unwrap(mask)
        mask_v = None if mask is None else self.to_bool(mask)
        other = _unwrap(other)
        other_v = None if other is None else self.cast(other, pointer.elem)
        shapes = [offset.shape] + ([mask_v.shape] if mask_v is not None else []) + \
            ([other_v.shape] if other_v is not None else [])
        shape = broadcast_shapes(*shapes)
        site = self.add_site("load", pointer, shape)
        self.loaded.add(pointer.base)
        deps = offset.deps | (mask_v.deps if mask_v is not None else frozenset())
        return self.emit(Val("load", shape, pointer.elem, (offset, mask_v, other_v),
                             {"base": pointer.base, "site": site}, deps))

    def tl_store(self, pointer: Any, value: Any, mask: Any = None, boundary_check: Any = (),
                 cache_modifier: Any = "", eviction_policy: Any = "", atomic_add: bool = False
                 ) -> None:
        if not isinstance(pointer, Ptr):
            raise self.fail("tl.store to something other than argument pointer + offsets")
        offset = self.as_val(pointer.offset)
        value = self.cast(value, pointer.elem)
        mask = _unwrap(mask)
        mask_v = None if mask is None else self.to_bool(mask)
        shape = broadcast_shapes(offset.shape, value.shape,
                                 *([mask_v.shape] if mask_v is not None else []))
        if broadcast_shapes(offset.shape, shape) != shape:
            raise self.fail("stored value has a larger shape than the pointer block")
        site = self.add_site("store", pointer, shape)
        self.stored.add(pointer.base)
        if atomic_add:
            self.atomic.add(pointer.base)
        self.stmts.append(Store(pointer.base, pointer.elem, offset, value, mask_v, shape, site,
                                atomic_add))

    def tl_atomic_add(self, pointer: Any, val: Any, mask: Any = None, sem: Any = None,
                      scope: Any = None) -> "_AtomicResult":
        """Accumulate into memory (Inductor's scatter-add, e.g. embedding backward). The
        launch runs its programs one after another, so the adds are exact and ordered."""
        self.tl_store(pointer, val, mask, atomic_add=True)
        return _AtomicResult(self)

    def add_site(self, kind: str, pointer: Ptr, shape: tuple) -> int:
        self.sites.append(Site(kind, pointer.base, pointer.elem, shape, self.here()))
        return len(self.sites) - 1

    # ---------------------------------------------------------------- reductions
    def reduce(self, inputs: list, axis: Any, combine: Callable[..., Any], keep_dims: bool = False,
               scan: bool = False, reverse: bool = False) -> list:
        """Generic tl.reduce (or, with `scan`, tl.associative_scan):
        `combine(*accumulators, *incoming)` builds the combine body."""
        vals = [self.as_val(v) for v in inputs]
        shape = broadcast_shapes(*(v.shape for v in vals))
        vals = [self.broadcast_to(v, shape) for v in vals]
        axis = _unwrap(axis)
        if axis is None:
            if scan:
                raise self.fail("tl.associative_scan needs an axis")
            axes = tuple(range(len(shape)))
        else:
            axes = (int(axis) % len(shape),)
        if scan:
            out_shape = shape
        else:
            out_shape = tuple(1 if d in axes else s for d, s in enumerate(shape)) \
                if _unwrap(keep_dims) else tuple(s for d, s in enumerate(shape) if d not in axes)
        params = [Val("param", (), v.dtype) for v in vals] + [Val("param", (), v.dtype) for v in vals]
        body: list = []
        with _Into(self, body):
            results = combine(*params)
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        if len(results) != len(vals):
            raise self.fail("combine function returns the wrong number of values")
        with _Into(self, body):
            results = [self.cast(r, v.dtype) for r, v in zip(results, vals)]
        if any(r.shape != () for r in results):
            raise self.fail("combine function produced a block (must be elementwise)")
        deps = frozenset().union(*(v.deps for v in vals))
        outputs = [Val("red", out_shape, v.dtype, deps=deps) for v in vals]
        self.stmts.append(Reduce(vals, axes, params, body, results, outputs, scan,
                                 bool(_unwrap(reverse))))
        return outputs

    def tl_associative_scan(self, input: Any, axis: Any, combine_fn: Any, reverse: bool = False
                            ) -> Any:
        inputs = list(input) if isinstance(input, (tuple, list)) else [input]
        fn = _unwrap(combine_fn)
        if not isinstance(fn, JITFunction):
            raise self.fail("tl.associative_scan combine_fn that is not a @triton.jit function")
        out = self.reduce(inputs, axis, lambda *p: self.inline(fn, list(p), {}), scan=True,
                          reverse=reverse)
        return tuple(out) if isinstance(input, (tuple, list)) else out[0]

    def tl_cumsum(self, x: Any, axis: Any = 0, reverse: bool = False, dtype: Any = None) -> Val:
        x = self.as_val(x)
        dt = _dt_name(dtype) if _unwrap(dtype) is not None else _sum_dtype(x.dtype)
        return self.reduce([self.cast(x, dt)], axis, lambda a, b: self.binary("add", a, b),
                           scan=True, reverse=reverse)[0]

    def tl_cumprod(self, x: Any, axis: Any = 0, reverse: bool = False) -> Val:
        x = self.as_val(x)
        return self.reduce([self.cast(x, _sum_dtype(x.dtype))], axis,
                           lambda a, b: self.binary("mul", a, b), scan=True, reverse=reverse)[0]

    def tl_reduce(self, input: Any, axis: Any, combine_fn: Any, keep_dims: bool = False) -> Any:
        inputs = list(input) if isinstance(input, (tuple, list)) else [input]
        fn = _unwrap(combine_fn)
        if not isinstance(fn, JITFunction):
            raise self.fail("tl.reduce combine_fn that is not a @triton.jit function")
        out = self.reduce(inputs, axis, lambda *p: self.inline(fn, list(p), {}), keep_dims)
        return tuple(out) if isinstance(input, (tuple, list)) else out[0]

    def tl_sum(self, x: Any, axis: Any = None, keep_dims: bool = False, dtype: Any = None) -> Val:
        x = self.as_val(x)
        dt = _dt_name(dtype) if _unwrap(dtype) is not None else _sum_dtype(x.dtype)
        return self.reduce([self.cast(x, dt)], axis, lambda a, b: self.binary("add", a, b),
                           keep_dims)[0]

    def tl_xor_sum(self, x: Any, axis: Any = None, keep_dims: bool = False) -> Val:
        return self.reduce([x], axis, lambda a, b: self.binary("xor", a, b), keep_dims)[0]

    def _arg_reduce(self, x: Val, axis: Any, keep_dims: bool, better: str) -> list:
        x = self.as_val(x)
        axis_i = int(_unwrap(axis)) % len(x.shape)
        index = self.view(Val("arange", (x.shape[axis_i],), "int32", attrs={"start": 0}),
                          x.shape, (axis_i,))

        def combine(av: Val, ai: Val, bv: Val, bi: Val) -> tuple:
            # incoming wins if strictly better, or equal with a lower index (tie-break left)
            take = self.binary("or", self.compare(better, bv, av),
                               self.binary("and", self.compare("==", bv, av),
                                           self.compare("<", bi, ai)))
            if D.is_float(av.dtype):  # NaN counts as the extreme value, like the interpreter
                take = self.binary("or", take, self.binary("and", self.compare("!=", bv, bv),
                                                           self.compare("==", av, av)))
            return self.where(take, bv, av), self.where(take, bi, ai)
        return self.reduce([x, index], axis_i, combine, keep_dims)

    def _extreme(self, x: Any, axis: Any, return_indices: bool, keep_dims: bool, fn: str, cmp: str):
        if _unwrap(return_indices):
            return tuple(self._arg_reduce(x, axis, keep_dims, cmp))
        return self.reduce([x], axis, lambda a, b: self._minmax(fn, a, b), keep_dims)[0]

    def tl_max(self, x: Any, axis: Any = None, return_indices: bool = False,
               return_indices_tie_break_left: bool = True, keep_dims: bool = False) -> Any:
        return self._extreme(x, axis, return_indices, keep_dims, "_maxp", ">")

    def tl_min(self, x: Any, axis: Any = None, return_indices: bool = False,
               return_indices_tie_break_left: bool = True, keep_dims: bool = False) -> Any:
        return self._extreme(x, axis, return_indices, keep_dims, "_minp", "<")

    def tl_argmax(self, x: Any, axis: Any, tie_break_left: bool = True, keep_dims: bool = False) -> Val:
        return self._arg_reduce(x, axis, keep_dims, ">")[1]

    def tl_argmin(self, x: Any, axis: Any, tie_break_left: bool = True, keep_dims: bool = False) -> Val:
        return self._arg_reduce(x, axis, keep_dims, "<")[1]


def _promote_to_tensor(b: Builder, x: Any) -> Val:
    return b.as_val(x)


def _helper_minmax(fn: str) -> Callable:
    return lambda b, x, y: b._minmax(fn, x, y)


def _helper_reduce(fn: str) -> Callable:
    return lambda b, x, dim: b.reduce([x], dim, lambda p, q: b._minmax(fn, p, q))[0]


# Inductor triton_helpers with a direct implementation (faster to emulate than inlining
# their tl.where formulations; same NaN-propagating semantics).
def _select_one(b: "Builder", x: Any, mask: Any, dim: Any, keep_dims: Any = False) -> Val:
    # Inductor's helper picks the one lane where `mask` holds (a looped scan's carry) with
    # integer bitcasts; a masked sum selects the same value without them.
    x = b.as_val(x)
    zero = b.const(0, x.dtype)
    return b.reduce([b.where(mask, x, zero)], dim, lambda p, q: b.binary("add", p, q),
                    keep_dims)[0]


_NATIVE_HELPERS: dict[str, Callable] = {
    "select_one": _select_one,
    "promote_to_tensor": _promote_to_tensor,
    "maximum": _helper_minmax("_maxp"), "minimum": _helper_minmax("_minp"),
    "max2": _helper_reduce("_maxp"), "min2": _helper_reduce("_minp"),
}


class _Into:
    """Context manager: statements emitted inside go to `stmts`."""

    def __init__(self, builder: Builder, stmts: list):
        self.builder, self.stmts = builder, stmts

    def __enter__(self) -> list:
        self.saved = self.builder.stmts
        self.builder.stmts = self.stmts
        return self.stmts

    def __exit__(self, *exc: object) -> None:
        self.builder.stmts = self.saved


def _mixes_pid(body: list, var_id: int) -> bool:
    """A loop is a tile loop if some scalar in its body combines program_id with its variable."""
    for stmt in walk(body):
        if isinstance(stmt, Val) and stmt.shape == () and "pid" in stmt.deps and var_id in stmt.deps:
            return True
    return False


def walk(stmts: list):
    """All statements, depth first, including loop/if/reduce bodies."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
        elif isinstance(s, Reduce):
            yield from walk(s.body)


_REDUCTION_LOOP = re.compile(r"^r\d*_?offset$")


def mark_tile_loop(body: list) -> None:
    """Keep `counts_tiles` only on the outermost tile loops: loops containing a store that
    mix program_id with their variable, or that are not Inductor reduction loops
    (`roffset`, `r0_offset`, ...)."""
    for s in body:
        if isinstance(s, Loop):
            has_store = any(isinstance(x, Store) for x in walk(s.body))
            if has_store and (s.counts_tiles or not _REDUCTION_LOOP.match(s.name)):
                s.counts_tiles = True
                for inner in walk(s.body):
                    if isinstance(inner, Loop):
                        inner.counts_tiles = False
                continue
            s.counts_tiles = False
            mark_tile_loop(s.body)
        elif isinstance(s, If):
            mark_tile_loop(s.then)
            mark_tile_loop(s.orelse)


def build_ir(kernel: Any, args: dict) -> KernelIR:
    b = Builder(kernel, args)
    b.current_tree = b.func.tree
    ir_ = b.build()
    mark_tile_loop(ir_.body)
    return ir_


def source_hash(texts: list) -> str:
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
