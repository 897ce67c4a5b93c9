"""The builder: interprets a Triton kernel's AST once per specialisation into `KernelIR`.

Constexprs and Python arithmetic on them are folded, every runtime value becomes a `Val`
with a static shape (block dims are constexprs) and a Triton dtype, and side effects
become statements. This module runs the statements: runtime `if`s merge the names their
branches assign (phis), runtime loops carry the names they update, `tl.static_range`
unrolls; expressions and calls are `expressions`' part. Anything outside the supported
subset raises `Unsupported` naming the construct and the kernel source line; the
emulator never guesses.
"""
from __future__ import annotations

import ast
import builtins
from typing import Any, Callable, Optional

from . import dtypes as D
from .block_ops import EmitInto
from .expressions import ExpressionInterpreter, ReturnSignal, Undefined
from .ir import If, KernelIR, Loop, PhiSet, Ptr, Return, Unsupported, Val, While
from .ops import broadcast_shapes, classify_callable, is_number, unwrap
from .source import KernelFunction, declared_mutations
from .tile_loop import mark_tile_loop, mixes_pid


def assigned_names(body: list) -> set:
    """Names the statements assign anywhere (nested blocks included)."""
    names = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def loop_test(loop: ast.stmt) -> list:
    """What a loop evaluates before every iteration besides its body: a `while`'s test."""
    return [loop.test] if isinstance(loop, ast.While) else []


def loaded_names(nodes: list, after_line: int = -1) -> set:
    """Names the statements read after source line `after_line`."""
    names = set()
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                    and getattr(node, "lineno", 0) > after_line:
                names.add(node.id)
    return names


class Builder(ExpressionInterpreter):
    """Abstract interpreter of one kernel specialisation; `build()` returns its KernelIR."""

    def __init__(self, kernel: Any, args: dict):
        """args: arg name -> ('ptr', elem dtype) | ('scalar', dtype) | ('const', value)."""
        super().__init__(KernelFunction(kernel))
        self.args = args

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
        except ReturnSignal:
            pass
        return KernelIR(self.func.name, self.stmts, params, pointers, scalars, self.sites,
                        self.stored, self.loaded, self.atomic, self.sources,
                        declared_mutations(self.func.pyfn))

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
        raise ReturnSignal(value)

    def s_If(self, node: ast.If) -> None:
        cond = unwrap(self.expr(node.test))
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
            with EmitInto(self, stmts):
                try:
                    self.block(body)
                except ReturnSignal as r:
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
            values = [b[1].get(name, Undefined(name, "")) for b in alive]
            if all(v is values[0] for v in values):
                merged[name] = values[0]
                continue
            if name not in live:
                merged[name] = Undefined(name, "assigned in a runtime `if` and not used after")
                continue
            if len(alive) == 1:
                merged[name] = values[0]
                continue
            if any(isinstance(v, Undefined) for v in values) or \
                    any(not isinstance(unwrap(v), (Val,)) and not is_number(unwrap(v)) for v in values):
                raise self.fail(f"variable {name!r} differs between the branches of a runtime `if` "
                                f"in a way the emulator cannot merge")
            vals = [self.as_val(v) for v in values]
            shape = broadcast_shapes(*(v.shape for v in vals))
            dt = vals[0].dtype
            for v in vals[1:]:
                dt = D.promote(dt, v.dtype)
            phi = Val("phi", shape, dt, deps=frozenset().union(*(v.deps for v in vals)))
            for (stmts, _, _), v in zip(alive, vals):
                with EmitInto(self, stmts):
                    src = self.broadcast_to(self.cast(v, dt), shape)
                    stmts.append(PhiSet(phi, src))
            merged[name] = phi
        self.env = merged
        self.stmts.append(If(cond, branches[0][0], branches[1][0]))
        if not alive:
            raise ReturnSignal(None)

    def live_after(self, node: ast.AST) -> set:
        """Names that may be read after `node` (later lines, or anywhere in an enclosing loop)."""
        live = loaded_names(self.current_tree.body, node.end_lineno)
        for loop in self.loop_stack:
            live |= loaded_names([*loop.body, *loop_test(loop)])
        return live

    def s_For(self, node: ast.For) -> None:
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.fail("`for` over something other than range/tl.range/tl.static_range")
        f = self.expr(it.func)
        _, fname = classify_callable(f)
        if f is not builtins.range and fname not in ("range", "static_range"):
            raise self.fail(f"`for` over {ast.unparse(it.func)}")
        bounds = [unwrap(self.expr(a)) for a in it.args]
        if not 1 <= len(bounds) <= 3:
            raise self.fail("range with a wrong number of arguments")
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds.append(1)
        if not isinstance(node.target, ast.Name) or node.orelse:
            raise self.fail("`for` with a non-name target or an `else` clause")
        if fname == "static_range":
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
        var = Val("loopvar", (), vdt)
        var.deps = frozenset({var.id}) | start.deps | stop.deps | step.deps

        def head() -> None:
            self.env[node.target.id] = var
        init, body, _ = self.carried_loop(node, head)
        self.stmts.extend(init)
        counts = "pid" in (start.deps | stop.deps | step.deps) or mixes_pid(body, var.id)
        self.stmts.append(Loop(var, start, stop, step, body, counts, node.target.id))
        self.env[node.target.id] = Undefined(node.target.id, "loop variable used after its loop")

    def s_While(self, node: ast.While) -> None:
        """A runtime loop whose scalar test is evaluated, with the carried values, before
        every iteration (Triton's scf.while). Python numbers it updates are carried as
        tensors, as Triton carries them."""
        if node.orelse:
            raise self.fail("`while` with an `else` clause")

        def head() -> tuple[list, Val]:
            test: list = []
            with EmitInto(self, test):
                cond = self.as_val(self.expr(node.test))
                if cond.shape != ():
                    raise self.fail("`while` on a block condition (Triton's test is a scalar)")
                cond = self.to_bool(cond)
            return test, cond
        init, body, (test, cond) = self.carried_loop(node, head)
        self.stmts.extend(init)
        self.stmts.append(While(test, cond, body))

    def carried_loop(self, node: ast.stmt, head: Callable[[], Any]) -> tuple[list, list, Any]:
        """Interprets a runtime loop's body once, the names it assigns and reads again (in
        its body, its test or after it) carried as phis: returns (the statements setting
        the phis' initial values, the body, what `head` returned). `head` runs at the top
        of every attempt, the phis in place (the loop variable, a `while`'s test); an
        attempt in which a carried value changes type is made again with the wider type.
        Afterwards the carried names hold their phis, the others assigned are undefined."""
        assigned = assigned_names(node.body)
        self.loop_stack.append(node)
        live = self.live_after(node) | self.read_before_write(node.body) | \
            loaded_names(loop_test(node))
        before = dict(self.env)
        overrides: dict = {}
        for _attempt in range(3):
            self.env = dict(before)
            init_stmts: list = []
            phis: dict = {}
            pointers: dict = {}  # carried pointers: their offsets are the phis
            with EmitInto(self, init_stmts):
                for name in sorted(assigned & live):
                    old = unwrap(before.get(name))
                    if isinstance(old, Ptr):
                        pointers[name], old = old, old.offset
                    elif not isinstance(old, Val) and not is_number(old):
                        continue
                    init = self.as_val(old)
                    shape, dt = overrides.get(name, (init.shape, init.dtype))
                    init = self.broadcast_to(self.cast(init, dt), shape)
                    phi = Val("phi", shape, dt, deps=init.deps)
                    init_stmts.append(PhiSet(phi, init))
                    phis[name] = phi
                    self.env[name] = self._carried(pointers.get(name), phi)
            headed = head()
            body: list = []
            with EmitInto(self, body):
                try:
                    self.block(node.body)
                except ReturnSignal:
                    raise self.fail("`return` directly inside a loop body")
                mismatch = {}
                for name, phi in phis.items():
                    new = self._carried_value(name, pointers.get(name))
                    if not isinstance(new, Val) and not is_number(new):
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
                    new = self.broadcast_to(self.as_val(self._carried_value(name, pointers.get(name)),
                                                        phi.dtype), phi.shape)
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
        after = dict(before)
        for name in assigned:
            after[name] = self._carried(pointers.get(name), phis[name]) if name in phis else \
                Undefined(name, "assigned inside a loop and not carried")
        self.env = after
        return init_stmts, body, headed

    @staticmethod
    def _carried(pointer: Optional[Ptr], phi: Val) -> Any:
        """What a carried name holds in and after its loop: the phi, or for a pointer the
        pointer at the phi's offset."""
        return phi if pointer is None else Ptr(pointer.base, pointer.elem, phi)

    def _carried_value(self, name: str, pointer: Optional[Ptr]) -> Any:
        """The value a carried name ends an iteration with (a pointer's: its offset)."""
        new = unwrap(self.env.get(name))
        if pointer is None:
            return new
        if not isinstance(new, Ptr) or new.base != pointer.base:
            raise self.fail(f"loop-carried pointer {name!r} is set to another buffer inside the "
                            f"loop (a pointer may only move within its buffer)")
        return new.offset

    def read_before_write(self, body: list) -> set:
        """Names the loop body may read before assigning them (so they need a loop-carried value)."""
        written: set = set()
        read: set = set()
        for stmt in body:
            # an assignment's reads, or all of a control-flow statement's (conservatively)
            read |= loaded_names([stmt]) - written
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                read.add(stmt.target.id)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                written |= assigned_names([stmt])
        return read


def build_ir(kernel: Any, args: dict) -> KernelIR:
    """The IR of one specialisation (`args` as `Builder` takes them), tile loops marked."""
    kir = Builder(kernel, args).build()
    mark_tile_loop(kir.body)
    return kir

