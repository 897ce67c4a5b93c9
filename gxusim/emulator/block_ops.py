"""Block operations: the IR-building primitives the interpreter and the `tl` library share.

`BlockOps` holds the statements being built and turns operations on values (constants,
elementwise arithmetic, casts, broadcasts, views, math calls, reductions, access sites)
into IR with Triton's dtype and shape rules; `EmitInto` redirects emitted statements into
a nested body. Folding applies when every operand is a Python number.
"""
from __future__ import annotations

import ast
import inspect
from typing import Any, Callable, Optional

from triton.language import semantic
from triton.runtime.jit import JITFunction

from . import dtypes as D
from .ir import Ptr, Reduce, Site, Unsupported, Val
from .ops import (BINARY_TEMPLATES, MATH, PYTHON_BINARY_OPS, PYTHON_COMPARISONS, broadcast_shapes,
                  is_number, unwrap)
from .source import KernelFunction



def _triton_negates_floats() -> bool:
    """Whether the installed Triton compiles `-x` of a float as a negation (fneg: -(+0.0) is
    -0.0) rather than as `0 - x` (+0.0), as Triton did before triton-lang/triton#10270 (3.6
    subtracts, 3.9 negates). The emulator follows the Triton that would compile for the GPU."""
    minus = getattr(getattr(semantic, "TritonSemantic", semantic), "minus")
    return "create_fneg" in inspect.getsource(minus)


FLOAT_NEGATION_FLIPS_ZERO = _triton_negates_floats()


class BlockOps:
    """IR-building state of one kernel specialisation and the operations that add to it."""

    def __init__(self, func: KernelFunction) -> None:
        self.func = func
        self.node: Optional[ast.AST] = None  # the statement being interpreted (for messages)
        self.stmts: list = []
        # Elementwise values already built, by operation and operands, one table per region
        # (`EmitInto`): an expression Inductor writes again (its indexing repeats whole
        # subexpressions, 27 times in a pooling backward's loads) is one value, as Triton's
        # CSE makes it, not a copy for the generated code to compute again.
        self.numbered: list[dict] = [{}]
        self.sites: list[Site] = []
        self.stored: set = set()
        self.loaded: set = set()
        self.atomic: set = set()
        self.pids: dict = {}

    def inline(self, f: JITFunction, args: list, kwargs: dict) -> Any:
        """Interpret a call of another @triton.jit function in place (the interpreter does)."""
        raise NotImplementedError

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
        x = unwrap(x)
        if isinstance(x, Val):
            return x
        if is_number(x):
            dt = D.weak_scalar_dtype(x, like) if like else D.python_scalar_dtype(x)
            return self.const(x, dt)
        if isinstance(x, Ptr):
            raise self.fail("a pointer used as a value")
        raise self.fail(f"value {x!r} of type {type(x).__name__} used as a tensor")

    def ew(self, template: str, args: list, out: str, cdts: list) -> Val:
        key = (template, out, tuple(cdts), *(a.id if a.op != "const" else
                                            (a.dtype, a.shape, a.attrs["value"]) for a in args))
        for table in reversed(self.numbered):  # a region sees the values of those around it
            if key in table:
                return table[key]
        shape = broadcast_shapes(*(a.shape for a in args))
        deps = frozenset().union(*(a.deps for a in args))
        value = self.emit(Val("ew", shape, out, tuple(args),
                              {"tmpl": template, "cdts": tuple(cdts)}, deps))
        self.numbered[-1][key] = value
        return value

    def cast(self, x: Any, dtype: str) -> Val:
        v = self.as_val(x, dtype)
        if v.dtype == dtype:
            return v
        if v.op == "const":
            return self.const(v.attrs["value"], dtype, v.shape)
        return self.ew("{0}", [v], dtype, [dtype])

    def bitcast(self, x: Any, dtype: str) -> Val:
        """`x.to(dtype, bitcast=True)`: the same bits read as another type of their width."""
        v = self.as_val(x)
        template = D.bitcast(v.dtype, dtype)
        if template is None:
            raise self.fail(f"bitcast of {v.dtype} to {dtype} (Triton reinterprets only "
                            f"types of the same width)")
        return v if v.dtype == dtype else self.ew(template, [v], dtype, [v.dtype])

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
        a, b = unwrap(a), unwrap(b)
        if not isinstance(a, (Val, Ptr)) and not isinstance(b, (Val, Ptr)):
            return PYTHON_BINARY_OPS[op](a, b)
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            return self.pointer_arith(op, a, b)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        va, vb = self.as_val(a, bdt), self.as_val(b, adt)
        if op in ("lshift", "rshift") or op in ("and", "or", "xor"):
            if D.is_float(adt) or D.is_float(bdt):
                raise self.fail(f"bitwise {op} on floating point")
        cdt = D.promote(adt, bdt, div=(op == "truediv"))
        int_t, float_t = BINARY_TEMPLATES[op]
        template = float_t if D.is_float(cdt) else int_t
        if template is None:
            raise self.fail(f"operator {op} on {cdt}")
        return self.ew(template, [va, vb], cdt, [cdt, cdt])

    def compare(self, op: str, a: Any, b: Any) -> Any:
        a, b = unwrap(a), unwrap(b)
        if not isinstance(a, Val) and not isinstance(b, Val):
            if isinstance(a, Ptr) or isinstance(b, Ptr):
                raise self.fail("pointer comparison")
            return PYTHON_COMPARISONS[op](a, b)
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
        x = unwrap(x)
        if not isinstance(x, Val):
            return {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v,
                    ast.Invert: lambda v: ~v}[op](x)
        if op is ast.UAdd:
            return x
        if op is ast.USub:
            if D.is_float(x.dtype) and not FLOAT_NEGATION_FLIPS_ZERO:
                return self.ew("(0.0 - {0})", [x], x.dtype, [x.dtype])
            return self.ew("(-{0})", [x], x.dtype, [x.dtype])
        if op is ast.Not or (op is ast.Invert and x.dtype == D.BOOL):
            return self.ew("(not {0})", [self.to_bool(x)], D.BOOL, [D.BOOL])
        if D.is_float(x.dtype):
            raise self.fail("~ on floating point")
        return self.ew("(~{0})", [x], x.dtype, [x.dtype])

    def where(self, c: Any, a: Any, b: Any) -> Val:
        c = self.to_bool(c)
        a, b = unwrap(a), unwrap(b)
        if not isinstance(a, Val) and not isinstance(b, Val):
            a = self.as_val(a)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        cdt = D.promote(adt, bdt)
        return self.ew("({1} if {0} else {2})", [c, self.as_val(a, bdt), self.as_val(b, adt)], cdt,
                       [D.BOOL, cdt, cdt])

    def math_call(self, name: str, args: list) -> Val:
        """A math function of MATH. "float" functions of integers compute in fp32; the
        others of integers (predicates such as isnan, integer results such as ilogb) are
        refused: libdevice has only fp32/fp64 versions, so Triton fails to compile them."""
        if name not in MATH:
            raise self.fail(f"math function {name} (not emulated)")
        template, kind = MATH[name]
        vals = [self.as_val(a) for a in args]
        cdt = vals[0].dtype
        for v in vals[1:]:
            cdt = D.promote(cdt, v.dtype)
        if kind == "same":
            return self.ew(template, vals, cdt, [cdt] * len(vals))
        if not D.is_float(cdt):
            if kind != "float":
                raise self.fail(f"{name} of an integer ({cdt}) value: Triton's libdevice {name} "
                                f"takes fp32/fp64 only")
            cdt = "fp32"
        out = {"float": cdt, "pred": D.BOOL}.get(kind, kind)
        return self.ew(template, vals, out, [cdt] * len(vals))

    def minmax(self, fn: str, a: Any, b: Any) -> Val:
        a, b = unwrap(a), unwrap(b)
        adt = a.dtype if isinstance(a, Val) else D.weak_scalar_dtype(a, b.dtype)
        bdt = b.dtype if isinstance(b, Val) else D.weak_scalar_dtype(b, a.dtype)
        cdt = D.promote(adt, bdt)
        return self.ew(f"{fn}({{0}}, {{1}})", [self.as_val(a, bdt), self.as_val(b, adt)], cdt,
                       [cdt, cdt])

    def view(self, src: Val, shape: tuple, mapping: tuple) -> Val:
        """src dim k is out dim mapping[k]; out dims not mapped are new unit axes."""
        if shape == src.shape and mapping == tuple(range(len(shape))):
            return src
        if src.op == "const":
            return self.const(src.attrs["value"], src.dtype, shape)
        return Val("view", shape, src.dtype, (src,), {"map": mapping}, src.deps)

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
        axis = unwrap(axis)
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
                if unwrap(keep_dims) else tuple(s for d, s in enumerate(shape) if d not in axes)
        params = [Val("param", (), v.dtype) for v in vals] + [Val("param", (), v.dtype) for v in vals]
        body: list = []
        with EmitInto(self, body):
            results = combine(*params)
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        if len(results) != len(vals):
            raise self.fail("combine function returns the wrong number of values")
        with EmitInto(self, body):
            results = [self.cast(r, v.dtype) for r, v in zip(results, vals)]
        if any(r.shape != () for r in results):
            raise self.fail("combine function produced a block (must be elementwise)")
        deps = frozenset().union(*(v.deps for v in vals))
        outputs = [Val("red", out_shape, v.dtype, deps=deps) for v in vals]
        self.stmts.append(Reduce(vals, axes, params, body, results, outputs, scan,
                                 bool(unwrap(reverse))))
        return outputs


class EmitInto:
    """Context manager: statements emitted inside go to `stmts`."""

    def __init__(self, builder: BlockOps, stmts: list):
        self.builder, self.stmts = builder, stmts

    def __enter__(self) -> list:
        self.saved = self.builder.stmts
        self.builder.stmts = self.stmts
        self.builder.numbered.append({})
        return self.stmts

    def __exit__(self, *exc: object) -> None:
        self.builder.stmts = self.saved
        self.builder.numbered.pop()

