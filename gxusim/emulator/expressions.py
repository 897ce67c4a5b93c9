"""Expression interpretation: evaluates a kernel's AST expressions to Python values
(folded constexprs), pointers or IR values, and runs calls: `tl.*` functions through the
`tl` library, math through the op tables, Inductor helpers natively where there is a
native version, and other `@triton.jit` functions by inlining their bodies.
"""
from __future__ import annotations

import ast
import builtins
import functools
import inspect
import dataclasses
import math
from typing import Any

import triton.language as tl
from triton.language.core import is_builtin
from triton.runtime.jit import JITFunction

from . import tl_library, tl_permutations, tl_reductions
from .block_ops import BlockOps
from .ir import Ptr, Val
from .ops import (AST_BINARY_OPS, AST_COMPARISONS, IDENTITY_TL, IGNORED_TL, MATH, UNSUPPORTED_TL,
                  classify_callable, unwrap)
from .source import KernelFunction

TL_FUNCTIONS = {**tl_library.FUNCTIONS, **tl_reductions.FUNCTIONS, **tl_permutations.FUNCTIONS}
# Python builtins Triton's code generator turns into tl functions where a tensor is involved.
BUILTINS_ON_TENSORS = {builtins.min: "minimum", builtins.max: "maximum"}


@dataclasses.dataclass(frozen=True)
class _Method:
    """A tensor method looked up on a value (`x.to`, `x.sum`): called with the value first."""
    obj: Val
    name: str


class Undefined:
    """A name that has no value here (and why), so reading it fails with a clear message."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why


class ReturnSignal(Exception):
    """`return` in the interpreted code: unwinds to the function being interpreted."""

    def __init__(self, value: Any):
        self.value = value



def _has_tensor(args: list, kwargs: dict) -> bool:
    return any(isinstance(unwrap(a), (Val, Ptr)) for a in [*args, *kwargs.values()])


class ExpressionInterpreter(BlockOps):
    """The expression half of the interpreter (`Builder` adds statements): names resolve
    in `env`, then the function's globals, then builtins."""

    def __init__(self, func: KernelFunction) -> None:
        super().__init__(func)
        self.env: dict = {}
        self.sources = [func.src]  # the kernel's and every inlined function's (cache keys)
        self.loop_stack: list = []  # runtime `for` nodes being interpreted (liveness)
        self.inline_depth = 0
        self.current_tree = func.tree

    def block(self, body: list) -> None:
        """Interpret a list of statements (`Builder` implements it)."""
        raise NotImplementedError

    def lookup(self, name: str) -> Any:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, Undefined):
                raise self.fail(f"variable {name!r} is not defined here ({value.why})")
            return value
        if name in self.func.globals:
            return unwrap(self.func.globals[name])
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.fail(f"unknown name {name!r}")

    def binop(self, op: type, a: Any, b: Any) -> Any:
        if op is ast.Pow and not _has_tensor([a, b], {}):
            return unwrap(a) ** unwrap(b)  # compile-time arithmetic (`2**log_k`)
        if op not in AST_BINARY_OPS:
            raise self.fail(f"operator {op.__name__}")
        return self.binary(AST_BINARY_OPS[op], a, b)

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
            # a tensor is never None (`sorter_ptr is None`); other identities have no meaning
            if (isinstance(left, (Val, Ptr)) or isinstance(right, (Val, Ptr))) and \
                    left is not None and right is not None:
                raise self.fail("`is` on a tensor")
            return (left is right) == isinstance(op, ast.Is)
        if isinstance(op, (ast.In, ast.NotIn)):
            return (left in right) == isinstance(op, ast.In)
        return self.compare(AST_COMPARISONS[type(op)], left, right)

    def e_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        result = self.expr(node.values[0])
        for value_node in node.values[1:]:
            if not isinstance(unwrap(result), Val):
                if bool(unwrap(result)) != is_and:
                    return result  # Python short-circuit on constants
                result = self.expr(value_node)
                continue
            other = self.expr(value_node)
            result = self.binary("and" if is_and else "or", self.to_bool(result), self.to_bool(other))
        return result

    def e_IfExp(self, node: ast.IfExp) -> Any:
        cond = unwrap(self.expr(node.test))
        if not isinstance(cond, Val):
            return self.expr(node.body if cond else node.orelse)
        return self.where(cond, self.expr(node.body), self.expr(node.orelse))

    def e_Attribute(self, node: ast.Attribute) -> Any:
        obj = unwrap(self.expr(node.value))
        attr = node.attr
        if isinstance(obj, Val):
            if attr == "dtype":
                return tl.core.dtype(obj.dtype)
            if attr == "shape":
                return [tl.constexpr(s) for s in obj.shape]
            if attr == "numel":
                return math.prod(obj.shape)
            if attr == "T":
                return TL_FUNCTIONS["trans"](self, obj)
            if attr in TL_FUNCTIONS:
                return _Method(obj, attr)
            raise self.fail(f"tensor attribute .{attr}")
        if isinstance(obj, Ptr):
            if attr == "dtype":
                return tl.pointer_type(tl.core.dtype(obj.elem))
            raise self.fail(f"pointer attribute .{attr}")
        try:
            return unwrap(getattr(obj, attr))
        except AttributeError:
            raise self.fail(f"attribute {attr!r} of {obj!r}") from None

    def e_Slice(self, node: ast.Slice) -> slice:
        """A slice of a Python sequence (`x.shape[:-1]`); tensor subscripts take theirs apart."""
        return slice(*(None if part is None else unwrap(self.expr(part))
                       for part in (node.lower, node.upper, node.step)))

    def e_Subscript(self, node: ast.Subscript) -> Any:
        obj = unwrap(self.expr(node.value))
        index = node.slice
        if not isinstance(obj, Val):
            if isinstance(obj, Ptr):
                raise self.fail("subscript of a pointer")
            return obj[unwrap(self.expr(index))]
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
            return TL_FUNCTIONS[f.name](self, f.obj, *args, **kwargs)
        category, name = classify_callable(f)
        if category == "math" or (category == "tl" and name in MATH and name not in TL_FUNCTIONS):
            return self.math_call(name, args)
        if category == "tl":
            if name in UNSUPPORTED_TL:
                raise self.fail(f"tl.{name} ({UNSUPPORTED_TL[name]} are not emulated)")
            if name in IGNORED_TL:
                return None
            if name in IDENTITY_TL:
                return args[0]
            handler = TL_FUNCTIONS.get(name)
            if handler is not None:
                return handler(self, *args, **kwargs)
            if f is tl.constexpr:
                return args[0]
            if not is_builtin(f) and not isinstance(f, JITFunction) and not _has_tensor(args, kwargs):
                # compile-time Python of the library: dtype methods (`x.dtype.is_floating()`,
                # as triton_helpers' is_floating calls it), `tl.core.get_int_dtype`, ...
                return f(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
        if category == "helper" and name in tl_reductions.HELPERS:
            return tl_reductions.HELPERS[name](self, *args, **kwargs)
        if isinstance(f, JITFunction):
            return self.inline(f, args, kwargs)
        if category == "other" and callable(f) and not _has_tensor(args, kwargs):
            return f(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})
        if f in BUILTINS_ON_TENSORS and not kwargs and len(args) >= 2:
            return functools.reduce(lambda x, y: TL_FUNCTIONS[BUILTINS_ON_TENSORS[f]](self, x, y), args)
        raise self.fail(f"call to {getattr(f, '__module__', '')}.{name or f!r}")

    def inline(self, f: JITFunction, args: list, kwargs: dict) -> Any:
        callee = KernelFunction(f)
        self.sources.append(callee.src)
        # the defaults as Python evaluated them, in the callee's module (Triton's library
        # writes `descending: core.constexpr = core.CONSTEXPR_0`)
        parameters = inspect.signature(f.fn).parameters
        env: dict = {}
        for i, (name, parameter) in enumerate(parameters.items()):
            if i < len(args):
                env[name] = args[i]
            elif name in kwargs:
                env[name] = kwargs[name]
            elif parameter.default is not inspect.Parameter.empty:
                env[name] = unwrap(parameter.default)
            else:
                raise self.fail(f"missing argument {name!r} of {callee.name}")
        saved = (self.func, self.env, self.node, self.loop_stack, self.current_tree)
        self.func, self.env, self.loop_stack, self.current_tree = callee, env, [], callee.tree
        self.inline_depth += 1
        try:
            self.block(callee.tree.body)
            result = None
        except ReturnSignal as r:
            result = r.value
        finally:
            self.inline_depth -= 1
            self.func, self.env, self.node, self.loop_stack, self.current_tree = saved
        return result

