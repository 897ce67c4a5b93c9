"""Back end: kernel IR -> Python source of numba functions, compiled and cached.

One generated module per kernel specialisation holds `_program` (one program instance:
its tile loops, with every block operation fused into scalar loops over block elements)
and `launch` (prange over contiguous chunks of programs, one chunk per thread). Block
values live in registers inside a fused loop ("group") and are written to an array only
when a later group, a reduction or a view reads them.

Every memory access is guarded: a masked-off lane does nothing, an unmasked lane outside
the argument's storage is recorded (program, site, offset) and skipped. With checks on,
each store (and each load of a stored-to storage) records the first two distinct
programs per element in per-thread arrays, which `runtime.merge_tracking` combines
exactly afterwards, so the parallel run stays race-free.

The generated source is keyed by its own hash: modules are written to the cache dir
(`$GXUSIM_CACHE_DIR` or `~/.cache/gxusim/emulator`) and imported, and numba's
`cache=True` keeps the machine code there, so a second process does not pay the JIT.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import math
import os
import sys
import threading
from pathlib import Path
from typing import Any, Optional

from . import dtypes as D
from .frontend import If, KernelIR, Loop, PhiSet, Reduce, Return, Store, Val, walk

_RUNTIME_FILES = ("runtime.py", "backend.py", "dtypes.py")


@dataclasses.dataclass(frozen=True)
class Layout:
    """Runtime facts the generated code depends on (part of the specialisation)."""
    track_reads: frozenset  # pointer args whose loads are recorded (their storage is stored to)
    checks: bool  # record stores/loads for conflict, race and coverage checks
    program_dtype: str  # smallest signed int holding every program id (tracking arrays)


@dataclasses.dataclass
class Group:
    shape: tuple
    items: list = dataclasses.field(default_factory=list)
    pre: list = dataclasses.field(default_factory=list)
    defined: set = dataclasses.field(default_factory=set)  # Val ids computed here
    view_reads: set = dataclasses.field(default_factory=set)  # Val ids read through a view
    phis_set: set = dataclasses.field(default_factory=set)
    loads: set = dataclasses.field(default_factory=set)  # alias classes loaded
    stores: set = dataclasses.field(default_factory=set)


def item_shape(s: Any) -> tuple:
    if isinstance(s, Store):
        return s.shape
    if isinstance(s, PhiSet):
        return s.phi.shape
    return s.shape


def operands(s: Any) -> list:
    if isinstance(s, Store):
        return [s.offset, s.value] + ([s.mask] if s.mask is not None else [])
    if isinstance(s, PhiSet):
        return [s.src]
    return [a for a in s.args if a is not None]


def base_reads(v: Val, via_view: bool = False):
    """(Val, read through a view?) for the value behind each operand."""
    if v.op == "view":
        yield from base_reads(v.args[0], True)
    else:
        yield v, via_view


class Planner:
    """Splits statement lists into fused groups and decides which values need arrays."""

    def __init__(self, alias: dict):
        self.alias = alias  # pointer arg -> alias class
        self.def_group: dict = {}
        self.materialize: set = set()

    def plan(self, stmts: list) -> list:
        units, cur = [], None
        for s in stmts:
            if isinstance(s, (Store, PhiSet)) or (isinstance(s, Val) and s.op in ("ew", "load")):
                shape = item_shape(s)
                if shape == () and cur is not None and cur.shape != () and \
                        isinstance(s, Val) and s.op == "ew":
                    cur.pre.append(s)  # a pure scalar op: hoist it out of the block loop
                    self.def_group[s.id] = None
                    continue
                if cur is None or cur.shape != shape or self.hazard(cur, s):
                    cur = Group(shape)
                    units.append(cur)
                self.add(cur, s)
            else:
                cur = None
                if isinstance(s, Loop):
                    s.body = self.plan(s.body)
                elif isinstance(s, If):
                    s.then, s.orelse = self.plan(s.then), self.plan(s.orelse)
                elif isinstance(s, Reduce):
                    s.body = self.plan(s.body)
                    for v in s.inputs:
                        for b, _ in base_reads(v):
                            self.need_array(b, None)
                units.append(s)
        return units

    def hazard(self, g: Group, s: Any) -> bool:
        for op in operands(s):
            for b, via_view in base_reads(op):
                if via_view and (b.id in g.defined or b.id in g.phis_set):
                    return True
        if isinstance(s, PhiSet) and s.phi.id in g.view_reads:
            return True
        if isinstance(s, Val) and s.op == "load" and self.alias[s.attrs["base"]] in g.stores:
            return True
        return isinstance(s, Store) and self.alias[s.base] in g.loads

    def add(self, g: Group, s: Any) -> None:
        g.items.append(s)
        for op in operands(s):
            for b, via_view in base_reads(op):
                if via_view:
                    g.view_reads.add(b.id)
                if b.id not in g.defined:
                    self.need_array(b, g)
        if isinstance(s, Val):
            g.defined.add(s.id)
            self.def_group[s.id] = g
            if s.op == "load":
                g.loads.add(self.alias[s.attrs["base"]])
        elif isinstance(s, Store):
            g.stores.add(self.alias[s.base])
        else:
            g.phis_set.add(s.phi.id)

    def need_array(self, v: Val, reader: Optional[Group]) -> None:
        if v.shape != () and v.op in ("ew", "load"):
            if reader is None or self.def_group.get(v.id) is not reader:
                self.materialize.add(v.id)


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

    def live_words(self) -> list[tuple[int, int]]:
        """(block elements, 32-bit words of the block values it touches) per fused loop."""
        out = []
        for g in walk(self.units):
            if isinstance(g, Group) and g.shape:
                vals = {}
                for s in g.items:
                    if isinstance(s, Val):
                        vals[s.id] = s
                    for op in operands(s):
                        for b, _ in base_reads(op):
                            if b.shape and b.op not in ("const", "arange"):
                                vals[b.id] = b
                words = sum(2 if D.bits(v.dtype) > 32 else 1 for v in vals.values())
                out.append((math.prod(g.shape), words))
        return out

    def smem_bytes(self, num_warps: int) -> int:
        """Cross-warp scratch: one 32-bit word per warp for each reduced row (a reduction's
        output element, or a scan's row: a scan exchanges one partial per warp and row)."""
        def rows(r: Reduce, output: Val) -> int:
            shape = r.inputs[0].shape
            return math.prod(s for d, s in enumerate(shape) if d not in r.axes) if r.scan \
                else math.prod(output.shape)
        return max((rows(r, o) * num_warps * 4 for r in walk(self.units)
                    if isinstance(r, Reduce) for o in r.outputs), default=0)

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
        return out + [("tiles", ""), ("oob", ""), ("sites", ""), ("samp_off", ""),
                      ("samp_mask", ""), ("samp_flag", "")]

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
            f"# gxusim emulator: kernel {self.kir.name}; runtime {_runtime_hash()}",
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


def _runtime_hash() -> str:
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in _RUNTIME_FILES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:12]


def generate(kir: KernelIR, layout: Layout, alias: dict) -> Emitter:
    """The emitter of one specialisation, its module source generated (`.source`)."""
    emitter = Emitter(kir, layout, alias)
    emitter.source = emitter.module()
    return emitter


def cache_dir() -> Path:
    root = os.environ.get("GXUSIM_CACHE_DIR")
    path = Path(root) / "emulator" if root else Path.home() / ".cache" / "gxusim" / "emulator"
    path.mkdir(parents=True, exist_ok=True)
    return path


_modules: dict[str, Any] = {}
_lock = threading.Lock()


def load(source: str) -> Any:
    """The compiled `launch` of a generated module (memory cache, then disk, then write)."""
    key = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        if key in _modules:
            return _modules[key]
        path = cache_dir() / f"k_{key}.py"
        if not path.exists() or path.read_text() != source:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)  # atomic: concurrent processes see a whole file
        name = f"gxusim_emulated_{key}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[key] = module.launch
        return module.launch
