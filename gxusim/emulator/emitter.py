"""The code emitter: planned kernel IR -> Python source of numba functions.

One generated module per kernel specialisation holds `_program` (one program instance:
its tile loops, with every fused group written as scalar loops over block elements) and
`launch` (prange over contiguous chunks of programs, one chunk per thread). Block values
live in registers inside a group and are written to an array only when the planner says
a later group, a reduction or a view reads them.

Every memory access is guarded: a masked-off lane does nothing, an unmasked lane outside
the argument's storage is recorded (program, site, offset) and skipped. Per program and
access site the code counts the executions (`site_runs`) and the lanes that moved data
(`sites`). With checks on, each store (and each load of a stored-to storage) records the
first two distinct programs per element in per-thread arrays, which
`runtime.merge_tracking` combines exactly afterwards, so the parallel run stays race-free.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from . import dtypes as D
from .ir import If, KernelIR, Loop, PhiSet, Reduce, Return, Store, Val, walk
from .module_cache import runtime_hash
from .planner import Group, Planner

# The per-launch record arrays every generated kernel takes last, in this order.
RECORD_PARAMS = ("tiles", "oob", "sites", "site_runs", "samp_off", "samp_mask", "samp_flag")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Runtime facts the generated code depends on (part of the specialisation)."""
    track_reads: frozenset  # pointer args whose loads are recorded (their storage is stored to)
    checks: bool  # record stores/loads for conflict, race and coverage checks
    program_dtype: str  # smallest signed int holding every program id (tracking arrays)



class Emitter:
    """Writes the numba source of one kernel specialisation."""

    def __init__(self, kir: KernelIR, layout: Layout, alias: dict):
        self.kir = kir
        self.layout = layout
        self.lines: list[str] = []
        self.planner = Planner(alias)
        self.units = self.planner.plan(kir.body)
        self.arrays: dict[int, Val] = {}
        self.has_tile_loop = any(isinstance(s, Loop) and s.counts_tiles for s in walk(self.units))
        self.tmp = 0

    # ---------------------------------------------------------------- naming and reads
    def name(self, v: Val) -> str:
        if v.op == "arg":
            return f"s_{v.attrs['name']}"
        if v.op == "pid":
            return f"pid{v.attrs['axis']}"
        if v.op == "nprog":
            return f"np{v.attrs['axis']}"
        return f"v{v.id}"

    def is_array(self, v: Val) -> bool:
        return v.shape != () and (v.op in ("phi", "red") or v.id in self.planner.materialize)

    def flat(self, shape: tuple, idx: list) -> str:
        terms, stride = [], 1
        for size, i in reversed(list(zip(shape, idx))):
            if i != "0" and size != 1:
                terms.append(i if stride == 1 else f"{i} * {stride}")
            stride *= size
        return " + ".join(reversed(terms)) or "0"

    def read(self, v: Val, idx: list, group: Optional[Group]) -> str:
        if v.op == "const":
            return D.literal(v.attrs["value"], v.dtype)
        if v.shape == ():
            return self.name(v)
        idx = ["0" if size == 1 else i for size, i in zip(v.shape, idx)]
        if v.op == "arange":
            start = v.attrs["start"]
            return f"np.int32({idx[0]}{f' + {start}' if start else ''})"
        if v.op == "view":
            src = v.args[0]
            return self.read(src, ["0" if src.shape[k] == 1 else idx[m]
                                   for k, m in enumerate(v.attrs["map"])], None)
        if group is not None and v.id in group.defined:
            return self.name(v)
        if not self.is_array(v):
            raise AssertionError(f"{v} read outside its group but not materialised")
        self.arrays[v.id] = v
        return f"a{v.id}[{self.flat(v.shape, idx)}]"

    def operand(self, v: Val, cdt: str, gidx: list, group: Optional[Group]) -> str:
        rank = len(gidx)
        idx = gidx[rank - len(v.shape):] if v.shape else []
        return D.convert(self.read(v, idx, group), v.dtype, cdt)

    # ---------------------------------------------------------------- output
    def w(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def fresh(self, prefix: str) -> str:
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def units_code(self, units: list, depth: int) -> None:
        start = len(self.lines)
        for u in units:
            if isinstance(u, Group):
                self.group_code(u, depth)
            elif isinstance(u, Loop):
                self.loop_code(u, depth)
            elif isinstance(u, If):
                self.w(depth, f"if {self.name(u.cond)}:")
                self.units_code(u.then, depth + 1)
                self.w(depth, "else:")
                self.units_code(u.orelse, depth + 1)
            elif isinstance(u, Return):
                self.w(depth, "return")
            elif isinstance(u, Reduce):
                self.reduce_code(u, depth)
            else:
                raise AssertionError(f"unplanned statement {u}")
        if len(self.lines) == start:
            self.w(depth, "pass")

    def loop_code(self, loop: Loop, depth: int) -> None:
        var = self.name(loop.var)
        it = self.fresh("it")
        bounds = ", ".join(self.read(b, [], None) for b in (loop.start, loop.stop, loop.step))
        self.w(depth, f"for {it} in range({bounds}):")
        self.w(depth + 1, f"{var} = {D.COMPUTE[loop.var.dtype]}({it})")
        if loop.counts_tiles:
            self.w(depth + 1, "tiles[p] += 1")
        self.units_code(loop.body, depth + 1)

    def group_code(self, g: Group, depth: int) -> None:
        for s in g.pre:
            self.item_code(s, g, [], depth, {})
        sites = [s for s in g.items if isinstance(s, Store) or (isinstance(s, Val) and s.op == "load")]
        counters = {}
        for s in sites:
            k = s.site if isinstance(s, Store) else s.attrs["site"]
            counters[k] = (self.fresh("cnt"), self.fresh("smp"))
            self.w(depth, f"{counters[k][0]} = 0")
            if self.layout.checks:
                self.w(depth, f"{counters[k][1]} = p == 0 and samp_flag[{k}] == 0")
        if any(isinstance(s, Store) for s in sites) and not self.has_tile_loop:
            self.w(depth, "tiles[p] = 1")
        idx = []
        for size in g.shape:
            i = self.fresh("i")
            self.w(depth + len(idx), f"for {i} in range({size}):")
            idx.append(i)
        inner = depth + len(idx)
        if g.shape:
            self.w(inner, f"f = {self.flat(g.shape, idx)}")
        for s in g.items:
            self.item_code(s, g, idx, inner, counters)
        for k, (cnt, smp) in counters.items():
            self.w(depth, f"sites[p, {k}] += {cnt}")
            self.w(depth, f"site_runs[p, {k}] += 1")
            if self.layout.checks:
                self.w(depth, f"if {smp}:")
                self.w(depth + 1, f"samp_flag[{k}] = 1")

    def item_code(self, s: Any, g: Group, idx: list, d: int, counters: dict) -> None:
        flat = "f" if idx else "0"
        if isinstance(s, PhiSet):
            value = self.operand(s.src, s.phi.dtype, idx, g)
            if s.phi.shape == ():
                self.w(d, f"{self.name(s.phi)} = {value}")
            else:
                self.arrays[s.phi.id] = s.phi
                self.w(d, f"a{s.phi.id}[{flat}] = {value}")
            return
        if isinstance(s, Store):
            self.store_code(s, g, idx, d, counters[s.site])
            return
        if s.op == "load":
            self.load_code(s, g, idx, d, counters[s.attrs["site"]])
        else:
            cdts = s.attrs["cdts"]
            expr = s.attrs["tmpl"].format(*(self.operand(a, c, idx, g) for a, c in zip(s.args, cdts)))
            self.w(d, f"{self.name(s)} = {D.normalize(expr, s.dtype)}")
        if s.id in self.planner.materialize:
            self.arrays[s.id] = s
            self.w(d, f"a{s.id}[{flat}] = {self.name(s)}")

    def access_prologue(self, offset: Val, mask: Optional[Val], site: int, g: Group, idx: list,
                        d: int, smp: str) -> tuple[str, str, int]:
        o, m = self.fresh("o"), self.fresh("m")
        self.w(d, f"{o} = np.int64({self.operand(offset, offset.dtype, idx, g)})")
        self.w(d, f"{m} = {self.operand(mask, D.BOOL, idx, g) if mask is not None else 'True'}")
        if self.layout.checks and idx:
            self.w(d, f"if {smp}:")
            self.w(d + 1, f"samp_off[{site}, f] = {o}")
            self.w(d + 1, f"samp_mask[{site}, f] = {m}")
        self.w(d, f"if {m}:")
        return o, m, d + 1

    def oob_code(self, d: int, site: int, o: str) -> None:
        # per program and site: lanes out of bounds, and the first one's offset
        self.w(d, f"if oob[p, {site}, 0] == 0:")
        self.w(d + 1, f"oob[p, {site}, 1] = {o}")
        self.w(d, f"oob[p, {site}, 0] += 1")

    def record(self, d: int, first: str, second: str, ob: str) -> None:
        # first two distinct programs per element (programs arrive in increasing order)
        self.w(d, f"prev = {first}[{ob}]")
        self.w(d, "if prev == -1:")
        self.w(d + 1, f"{first}[{ob}] = pp")
        self.w(d, f"elif prev != pp and {second}[{ob}] == -1:")
        self.w(d + 1, f"{second}[{ob}] = pp")

    def load_code(self, v: Val, g: Group, idx: list, d: int, counter: tuple) -> None:
        base, site = v.attrs["base"], v.attrs["site"]
        offset, mask, other = v.args
        o, m, d1 = self.access_prologue(offset, mask, site, g, idx, d, counter[1])
        name = self.name(v)
        ob = self.fresh("ob")
        self.w(d1, f"{ob} = {o} + o_{base}")
        self.w(d1, f"if {ob} >= 0 and {ob} < n_{base}:")
        raw = f"b_{base}[{ob}]"
        loaded = {"fp16": f"_h2f({raw})", "bf16": f"_bf2f({raw})"}.get(v.dtype, raw)
        self.w(d1 + 1, f"{name} = {loaded}")
        self.w(d1 + 1, f"{counter[0]} += 1")
        if self.layout.checks and base in self.layout.track_reads:
            self.record(d1 + 1, f"r1_{base}", f"r2_{base}", ob)
        self.w(d1, "else:")
        self.w(d1 + 1, f"{name} = {D.literal(0, v.dtype)}")
        self.oob_code(d1 + 1, site, o)
        self.w(d, "else:")
        fill = self.operand(other, v.dtype, idx, g) if other is not None else D.literal(0, v.dtype)
        self.w(d + 1, f"{name} = {fill}")

    def store_code(self, s: Store, g: Group, idx: list, d: int, counter: tuple) -> None:
        o, m, d1 = self.access_prologue(s.offset, s.mask, s.site, g, idx, d, counter[1])
        ob = self.fresh("ob")
        value = self.operand(s.value, s.elem, idx, g)
        if s.atomic_add:
            raw = f"b_{s.base}[{ob}]"
            old = {"fp16": f"_h2f({raw})", "bf16": f"_bf2f({raw})"}.get(s.elem, raw)
            value = D.normalize(f"{old} + {value}", s.elem)
        stored = {"fp16": f"_f2h({value})", "bf16": f"_f2bf({value})"}.get(s.elem, value)
        self.w(d1, f"{ob} = {o} + o_{s.base}")
        self.w(d1, f"if {ob} >= 0 and {ob} < n_{s.base}:")
        self.w(d1 + 1, f"b_{s.base}[{ob}] = {stored}")
        self.w(d1 + 1, f"{counter[0]} += 1")
        if self.layout.checks and not s.atomic_add:  # atomics may share elements by design
            self.record(d1 + 1, f"w1_{s.base}", f"w2_{s.base}", ob)
        self.w(d1, "else:")
        self.oob_code(d1 + 1, s.site, o)

    def reduce_code(self, r: Reduce, d: int) -> None:
        if r.scan:
            self.scan_code(r, d)
            return
        shape = r.inputs[0].shape
        kept = [k for k in range(len(shape)) if k not in r.axes]
        idx = [""] * len(shape)
        depth = d
        for k in kept:
            idx[k] = self.fresh("i")
            self.w(depth, f"for {idx[k]} in range({shape[k]}):")
            depth += 1
        n = len(r.inputs)
        acc, inc = r.params[:n], r.params[n:]
        for k in r.axes:
            idx[k] = "0"
        for a, v in zip(acc, r.inputs):
            self.w(depth, f"{self.name(a)} = {self.read(v, list(idx), None)}")
        total = math.prod(shape[k] for k in r.axes)
        t = self.fresh("t")
        self.w(depth, f"for {t} in range(1, {total}):")
        stride = 1
        for k in reversed(r.axes):
            idx[k] = f"{t}" if stride == 1 and len(r.axes) == 1 else f"(({t} // {stride}) % {shape[k]})"
            stride *= shape[k]
        for b, v in zip(inc, r.inputs):
            self.w(depth + 1, f"{self.name(b)} = {self.read(v, list(idx), None)}")
        self.units_code(r.body, depth + 1)
        results = ", ".join(self.read(res, [], None) for res in r.results)
        self.w(depth + 1, f"{', '.join(self.name(a) for a in acc)} = {results}")
        out_idx = [idx[k] for k in kept]
        for a, out in zip(acc, r.outputs):
            if out.shape == ():
                self.w(depth, f"{self.name(out)} = {self.name(a)}")
            else:
                self.arrays[out.id] = out
                flat = self.flat(tuple(shape[k] for k in kept), out_idx)
                self.w(depth, f"a{out.id}[{flat}] = {self.name(a)}")

    def scan_code(self, r: Reduce, d: int) -> None:
        """Sequential prefix along the axis, once per position of the other axes."""
        shape = r.inputs[0].shape
        (axis,) = r.axes
        idx = [""] * len(shape)
        depth = d
        for k in range(len(shape)):
            if k != axis:
                idx[k] = self.fresh("i")
                self.w(depth, f"for {idx[k]} in range({shape[k]}):")
                depth += 1
        n = len(r.inputs)
        acc, inc = r.params[:n], r.params[n:]
        length = shape[axis]
        t = self.fresh("t")

        def position(step: str) -> str:
            return f"({length - 1} - {step})" if r.reverse else step

        def write_outputs(at: str, depth: int) -> None:
            out_idx = list(idx)
            out_idx[axis] = at
            for a, out in zip(acc, r.outputs):
                self.arrays[out.id] = out
                self.w(depth, f"a{out.id}[{self.flat(shape, out_idx)}] = {self.name(a)}")

        first = position("0")
        idx[axis] = first
        for a, v in zip(acc, r.inputs):
            self.w(depth, f"{self.name(a)} = {self.read(v, list(idx), None)}")
        write_outputs(first, depth)
        self.w(depth, f"for {t} in range(1, {length}):")
        idx[axis] = position(t)
        for b, v in zip(inc, r.inputs):
            self.w(depth + 1, f"{self.name(b)} = {self.read(v, list(idx), None)}")
        self.units_code(r.body, depth + 1)
        results = ", ".join(self.read(res, [], None) for res in r.results)
        self.w(depth + 1, f"{', '.join(self.name(a) for a in acc)} = {results}")
        write_outputs(position(t), depth + 1)
    # ---------------------------------------------------------------- module
    def params(self) -> list[tuple[str, str]]:
        """(kind, arg) for each runtime parameter, in order (the caller builds the values)."""
        out = []
        for name in self.kir.arg_names:
            if name in self.kir.pointers:
                out += [("buf", name), ("base", name), ("size", name)]
            elif name in self.kir.scalars:
                out.append(("scalar", name))
        if self.layout.checks:
            for name in self.kir.arg_names:
                if name in self.kir.stored:
                    out += [("w1", name), ("w2", name)]
                if name in self.layout.track_reads:
                    out += [("r1", name), ("r2", name)]
        return out + [(kind, "") for kind in RECORD_PARAMS]

    @staticmethod
    def param_name(kind: str, arg: str) -> str:
        prefix = {"buf": "b_", "base": "o_", "size": "n_", "scalar": "s_", "w1": "w1_", "w2": "w2_",
                  "r1": "r1_", "r2": "r2_"}
        return f"{prefix[kind]}{arg}" if kind in prefix else kind

    def module(self) -> str:
        body_start = len(self.lines)
        self.units_code(self.units, 1)
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        params = self.params()
        names = [self.param_name(k, a) for k, a in params]
        per_thread = {"w1", "w2", "r1", "r2"}
        program_args = [f"{n}[c]" if k in per_thread else n for (k, a), n in zip(params, names)]
        pdt = self.layout.program_dtype
        head = [
            f"# gxusim emulator: kernel {self.kir.name}; runtime {runtime_hash()}",
            "from numba import njit, prange",
            "from gxusim.emulator.runtime import *",
            "",
            "",
            "@njit(cache=True, error_model='numpy', nogil=True)",
            f"def _program(p, pid0, pid1, pid2, np0, np1, np2, {', '.join(names)}):",
            "    pid0, pid1, pid2 = np.int32(pid0), np.int32(pid1), np.int32(pid2)",
            "    np0, np1, np2 = np.int32(np0), np.int32(np1), np.int32(np2)",
            f"    pp = np.{pdt}(p)",
        ]
        for v in sorted(self.arrays.values(), key=lambda v: v.id):
            head.append(f"    a{v.id} = np.empty({math.prod(v.shape)}, {D.COMPUTE[v.dtype]})")
        launch = [
            "",
            "",
            "@njit(cache=True, parallel=True, error_model='numpy')",
            f"def launch(g0, g1, g2, threads, {', '.join(names)}):",
            "    programs = g0 * g1 * g2",
            "    for c in prange(threads):",
            "        for p in range(c * programs // threads, (c + 1) * programs // threads):",
            "            _program(p, p % g0, (p // g0) % g1, p // (g0 * g1), g0, g1, g2, "
            f"{', '.join(program_args)})",
            "",
        ]
        return "\n".join(head + body + launch)



def generate(kir: KernelIR, layout: Layout, alias: dict) -> Emitter:
    """The emitter of one specialisation, its module source generated (`.source`)."""
    emitter = Emitter(kir, layout, alias)
    emitter.source = emitter.module()
    return emitter
