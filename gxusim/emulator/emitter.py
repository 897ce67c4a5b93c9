"""The code emitter: planned kernel IR -> Python source of numba functions.

One generated module per kernel structure holds `_program`: one program instance, its
tile loops, with every fused group written as scalar loops over block elements
(`execution.launch` calls it for each program of the grid).
Integer constants (the sizes and strides Inductor writes into a kernel) are read from the
module's `consts` parameter and values are named by rank, so kernels that differ only in
their names and sizes share one module and one JIT compile. Block values live in registers
inside a group and are written to an array only when the planner says a later group, a
reduction or a view reads them.

Every memory access is guarded: a masked-off lane does nothing, an unmasked lane outside
the argument's storage is recorded (program, site, offset) and skipped. Per program and
access site the code counts the executions (`site_runs`) and the lanes whose mask held
(`lanes`; less the out-of-bounds ones, the lanes that moved data), with one counter per
distinct mask of a group and none for an unmasked site. With checks on, each store (and
each load of a stored-to storage) is tracked per thread (`tracking`): a run of
consecutive elements per site execution, logged as an interval, or per element when the
lanes are not consecutive; `Tracking.merge` turns the records into exact facts
afterwards, so the parallel run stays race-free.

A group execution runs one of two block loops: the dense loop (a cheap pass over the
addresses proved every lane masked in, in bounds and at consecutive elements: memory is
accessed directly, the runs are the whole block), or the general loop with every guard
above. Program 0's first execution of each site samples the lanes' offsets and masks for
the coalescing model, in either loop (groups of fewer than DENSE_MIN_LANES lanes have
only the general loop). The dense loop has no branches, so LLVM vectorises it; for that
it computes tanh by an estimate that knows where it may be off (SPECULATIVE_MATH), and an
execution unsure of a lane runs again in the general loop.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from . import dtypes as D
from .ir import If, KernelIR, Loop, PhiSet, Reduce, Return, Store, Val, While, walk
from .module_frame import TRACKING_PARAMS, module_source
from .ops import MATH, flat_index, unflat_index
from .planner import Group, Planner, base_reads
from .tracking import LOAD, NO_RUN, PER_ELEMENT, STORE



@dataclasses.dataclass
class SiteVars:
    """The generated code's variables for one access site in one group execution."""
    lanes: Optional[str]  # counts lanes whose mask held; shared by the group's sites with that mask
    counts_lanes: bool  # this site's access does the counting (the first site with its mask)
    sample: str  # true when this execution samples the site's offsets and masks
    run: str  # prefix of the site's run variables (tracking)
    start: str  # the dense loop's storage element of the site's lane 0 (see `dense_check`)


# The kinds of block loop a group execution may run (see `Emitter.dense_or_general_loop`).
GENERAL, DENSE = "general", "dense"
# Groups of fewer lanes run the general loop alone: a dense loop saves them little time and
# costs numba as much to compile as the rest of the module (resnet18's forward on the
# emulator, cold: 51 s with a dense loop for every group, 37 s without one under 256
# lanes; warm calls 165-185 ms either way).
DENSE_MIN_LANES = 256
# Math whose dense-loop form is a vectorisable estimate with a per-lane check (float32
# operands): template -> (estimate, unsure). Exact where the check is sure; see
# `Emitter.dense_or_general_loop` for what happens where it is not.
SPECULATIVE_MATH = {MATH["tanh"][0]: ("_tanh_fast({0})", "_tanh_unsure({0})")}


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
        self.has_tile_loop = any(isinstance(s, (Loop, While)) and s.counts_tiles
                                 for s in walk(self.units))
        self.loop_kind = GENERAL  # the kind of block loop being written
        self.unsure = None  # in a speculative dense loop: the variable its estimates set when unsure
        self.program_locals: list[str] = []  # initialisations at the top of `_program`
        self.constants: dict[tuple, int] = {}  # (value, dtype) -> index in `consts`
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

    def constant(self, value: Any, dt: str) -> str:
        """An integer constant as a read of the module's `consts` parameter (the sizes and
        strides Inductor writes into a kernel), so that kernels that differ only in them
        share one compiled module; other constants as literals."""
        if not D.is_integer(dt) or not -2**63 <= int(value) < 2**63:
            return D.literal(value, dt)
        key = (int(value), dt)
        if key not in self.constants:
            self.constants[key] = len(self.constants)
            self.program_locals.append(f"cst{self.constants[key]} = "
                                       f"{D.COMPUTE[dt]}(consts[{self.constants[key]}])")
        return f"cst{self.constants[key]}"

    def constant_values(self) -> list[int]:
        """The values of the `consts` parameter, in order."""
        return [value for value, _ in self.constants]

    def is_array(self, v: Val) -> bool:
        return v.shape != () and (v.op in ("phi", "red") or v.id in self.planner.materialize)

    def read(self, v: Val, idx: list, group: Optional[Group]) -> str:
        if v.op == "const":
            return self.constant(v.attrs["value"], v.dtype)
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
        if v.op == "reshape":  # the same row-major position in the source's shape
            return self.read(v.args[0], unflat_index(v.args[0].shape, flat_index(v.shape, idx)), None)
        if group is not None and v.id in group.defined:
            return self.name(v)
        if not self.is_array(v):
            raise AssertionError(f"{v} read outside its group but not materialised")
        self.arrays[v.id] = v
        return f"a{v.id}[{flat_index(v.shape, idx)}]"

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
            elif isinstance(u, While):
                self.while_code(u, depth)
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
        self.loop_body(loop, depth + 1)

    def while_code(self, loop: While, depth: int) -> None:
        self.w(depth, "while True:")
        self.units_code(loop.test, depth + 1)
        self.w(depth + 1, f"if not {self.read(loop.cond, [], None)}:")
        self.w(depth + 2, "break")
        self.loop_body(loop, depth + 1)

    def loop_body(self, loop: "Loop | While", depth: int) -> None:
        if loop.counts_tiles:
            self.w(depth, "tiles[p] += 1")
        self.units_code(loop.body, depth)

    @staticmethod
    def site_of(s: Any) -> int:
        return s.site if isinstance(s, Store) else s.attrs["site"]

    @staticmethod
    def mask_of(s: Any) -> Optional[Val]:
        return s.mask if isinstance(s, Store) else s.args[1]

    @staticmethod
    def offset_of(s: Any) -> Val:
        return s.offset if isinstance(s, Store) else s.args[0]

    @staticmethod
    def base_of(s: Any) -> str:
        return s.base if isinstance(s, Store) else s.attrs["base"]

    def site_vars(self, sites: list, depth: int) -> dict:
        """Site id -> `SiteVars`, initialised before the group's block loop."""
        out, mask_counters = {}, {}
        for s in sites:
            k, mask = self.site_of(s), self.mask_of(s)
            first_with_mask = mask is not None and mask.id not in mask_counters
            if first_with_mask:
                mask_counters[mask.id] = self.fresh("cnt")
                self.w(depth, f"{mask_counters[mask.id]} = 0")
            sv = SiteVars(mask_counters.get(mask.id) if mask is not None else None, first_with_mask,
                          self.fresh("smp"), self.fresh("run"), self.fresh("k"))
            if self.layout.checks:
                self.w(depth, f"{sv.sample} = p == 0 and samp_flag[{k}] == 0")
            if self.tracked(s):
                base = self.tracked(s)[0]
                # a thread already recording per element records this execution so too
                self.w(depth, f"{self.run_vars(sv.run)} = -1, "
                              f"({NO_RUN} if state_{base}[0] >= 0 else {PER_ELEMENT})")
            out[k] = sv
        return out

    def group_code(self, g: Group, depth: int) -> None:
        for s in g.pre:
            self.item_code(s, g, [], depth, {})
        sites = [s for s in g.items if isinstance(s, Store) or (isinstance(s, Val) and s.op == "load")]
        site_vars = self.site_vars(sites, depth)
        if any(isinstance(s, Store) for s in sites) and not self.has_tile_loop:
            self.w(depth, "tiles[p] = 1")
        if g.shape and sites:
            self.dense_or_general_loop(g, sites, depth, site_vars)
        else:
            self.block_loop(g, depth, site_vars, GENERAL)
        for s in sites:
            k = self.site_of(s)
            sv = site_vars[k]
            self.w(depth, f"lanes[p, {k}] += {sv.lanes or math.prod(g.shape)}")
            self.w(depth, f"site_runs[p, {k}] += 1")
            if self.layout.checks:
                self.w(depth, f"if {sv.sample}:")
                self.w(depth + 1, f"samp_flag[{k}] = 1")
            if self.tracked(s):
                base, kind = self.tracked(s)
                self.w(depth, f"_end_run({self.run_vars(sv.run)}, pp, {kind}, {self.tracking_args(base)})")

    def lane_loops(self, g: Group, depth: int) -> tuple[list, int]:
        """Opens the loop nest over the group's block elements (flat index `f`); returns
        (the loop variables, the depth inside)."""
        idx = []
        for size in g.shape:
            i = self.fresh("i")
            self.w(depth + len(idx), f"for {i} in range({size}):")
            idx.append(i)
        inner = depth + len(idx)
        if g.shape:
            self.w(inner, f"f = {flat_index(g.shape, idx)}")
        return idx, inner

    def block_loop(self, g: Group, depth: int, site_vars: dict, kind: str) -> None:
        """The scalar loop nest over the group's block elements, GENERAL or DENSE."""
        self.loop_kind = kind
        idx, inner = self.lane_loops(g, depth)
        for s in g.items:
            self.item_code(s, g, idx, inner, site_vars)
        self.loop_kind = GENERAL

    def speculative(self, s: Any) -> bool:
        """Whether the dense loop computes this value by a vectorisable estimate."""
        return isinstance(s, Val) and s.op == "ew" and s.attrs["tmpl"] in SPECULATIVE_MATH and \
            D.COMPUTE[s.attrs["cdts"][0]] == "np.float32"

    @staticmethod
    def can_rerun(g: Group) -> bool:
        """Whether running the group's block loop twice in one execution changes nothing:
        it updates no loop-carried value and adds nothing atomically (its stores do not
        touch what it loads: the planner splits groups there)."""
        return not any(isinstance(s, PhiSet) or (isinstance(s, Store) and s.atomic_add) for s in g.items)

    def dense_or_general_loop(self, g: Group, sites: list, depth: int, site_vars: dict) -> None:
        """The dense loop when this execution's accesses prove dense (an execution that
        samples them then records their consecutive offsets), else the general one. A
        dense loop that estimates some values (SPECULATIVE_MATH) and is unsure of one is
        not kept: the execution runs again in the general loop, which is exact. Groups
        under DENSE_MIN_LANES lanes take the general loop alone."""
        dense = self.dense_check(g, sites, depth, site_vars) \
            if math.prod(g.shape) >= DENSE_MIN_LANES else None
        if dense is None:
            self.block_loop(g, depth, site_vars, GENERAL)
            return
        speculate = self.can_rerun(g) and any(map(self.speculative, g.items))
        self.w(depth, f"if {dense}:")
        if speculate:
            self.unsure = self.fresh("unsure")
            self.w(depth + 1, f"{self.unsure} = False")
        self.block_loop(g, depth + 1, site_vars, DENSE)
        if speculate:
            self.w(depth + 1, f"{dense} = not {self.unsure}")
            self.unsure = None
        numel = math.prod(g.shape)
        self.w(depth, f"if {dense}:")
        body = len(self.lines)
        for s in sites:
            sv = site_vars[self.site_of(s)]
            if sv.counts_lanes:
                self.w(depth + 1, f"{sv.lanes} = {numel}")
            if self.tracked(s):
                self.w(depth + 1, f"{self.run_vars(sv.run)} = {sv.start}, {sv.start} + {numel}")
            if self.layout.checks:  # the sample a general loop takes: consecutive, all in
                lane = self.fresh("f")
                self.w(depth + 1, f"if {sv.sample}:")
                self.w(depth + 2, f"for {lane} in range({numel}):")
                self.w(depth + 3, f"samp_off[{self.site_of(s)}, {lane}] = "
                                  f"{sv.start} - o_{self.base_of(s)} + {lane}")
                self.w(depth + 3, f"samp_mask[{self.site_of(s)}, {lane}] = True")
        if len(self.lines) == body:
            self.w(depth + 1, "pass")
        self.w(depth, "else:")
        self.block_loop(g, depth + 1, site_vars, GENERAL)

    def address_slice(self, g: Group, roots: list) -> Optional[set]:
        """Ids of the group's values that the roots (offsets, masks) are computed from;
        None when one is a load (the addresses depend on data)."""
        needed, stack = set(), list(roots)
        while stack:
            for b, _ in base_reads(stack.pop()):
                if b.id in g.defined and b.id not in needed:
                    if b.op == "load":
                        return None
                    needed.add(b.id)
                    stack.extend(a for a in b.args if a is not None)
        return needed

    def dense_check(self, g: Group, sites: list, depth: int, site_vars: dict) -> Optional[str]:
        """Writes a vectorisable pass over the lanes computing only the addresses, and
        returns the name of a condition that holds when every site of this execution is
        dense: all lanes masked in, lane f at offset (lane 0's) + f, all in bounds. The
        dense loop then accesses memory directly: nothing to guard, count or record per
        lane, and its runs are the whole block. None when the addresses depend on loads.
        Once a program finds the group not dense it stops checking (a tail tile comes
        last; a strided 2D block is never dense), so the pass costs little where it fails."""
        offsets = {self.offset_of(s).id: self.offset_of(s) for s in sites}
        masks = {m.id: m for m in map(self.mask_of, sites) if m is not None}
        needed = self.address_slice(g, list(offsets.values()) + list(masks.values()))
        if needed is None:
            return None
        dense, addresses_dense = self.fresh("dense"), self.fresh("trydense")
        self.program_locals.append(f"{addresses_dense} = True")
        self.w(depth, f"{dense} = False")
        for s in sites:
            self.w(depth, f"{site_vars[self.site_of(s)].start} = 0")
        self.w(depth, f"if {addresses_dense}:")
        depth += 1
        # lanes are consecutive iff the residue offset - f is the same on every lane, i.e.
        # iff its AND and its OR over the lanes agree (then both are lane 0's offset)
        residue = {vid: (self.fresh("dand"), self.fresh("dor")) for vid in offsets}
        all_in = self.fresh("allin")
        for d_and, d_or in residue.values():
            self.w(depth, f"{d_and}, {d_or} = -1, 0")
        self.w(depth, f"{all_in} = True")
        idx, inner = self.lane_loops(g, depth)
        for s in g.items:
            if isinstance(s, Val) and s.id in needed:
                self.ew_code(s, g, idx, inner)
        for vid, v in offsets.items():
            d = self.fresh("d")
            self.w(inner, f"{d} = np.int64({self.operand(v, v.dtype, idx, g)}) - f")
            self.w(inner, f"{residue[vid][0]} &= {d}")
            self.w(inner, f"{residue[vid][1]} |= {d}")
        for m in masks.values():
            self.w(inner, f"{all_in} &= {self.operand(m, D.BOOL, idx, g)}")
        numel = math.prod(g.shape)
        terms = [all_in] + [f"{d_and} == {d_or}" for d_and, d_or in residue.values()]
        for s in sites:
            sv, base = site_vars[self.site_of(s)], self.base_of(s)
            self.w(depth, f"{sv.start} = {residue[self.offset_of(s).id][0]} + o_{base}")
            terms += [f"{sv.start} >= 0", f"{sv.start} + {numel} <= n_{base}"]
        self.w(depth, f"{addresses_dense} = {' and '.join(terms)}")
        self.w(depth, f"{dense} = {addresses_dense}")
        return dense

    def item_code(self, s: Any, g: Group, idx: list, d: int, site_vars: dict) -> None:
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
            self.store_code(s, g, idx, d, site_vars[self.site_of(s)])
            return
        if s.op == "load":
            self.load_code(s, g, idx, d, site_vars[self.site_of(s)])
        else:
            self.ew_code(s, g, idx, d)
        if s.id in self.planner.materialize:
            self.arrays[s.id] = s
            self.w(d, f"a{s.id}[{flat}] = {self.name(s)}")

    def ew_code(self, s: Val, g: Group, idx: list, d: int) -> None:
        cdts = s.attrs["cdts"]
        operands = [self.operand(a, c, idx, g) for a, c in zip(s.args, cdts)]
        template = s.attrs["tmpl"]
        if self.unsure is not None and self.speculative(s):
            template, unsure = SPECULATIVE_MATH[template]
            self.w(d, f"{self.unsure} |= {unsure.format(*operands)}")
        self.w(d, f"{self.name(s)} = {D.normalize(template.format(*operands), s.dtype)}")

    def access_prologue(self, offset: Val, mask: Optional[Val], site: int, g: Group, idx: list,
                        d: int, sv: SiteVars) -> tuple[str, str, int]:
        o, m = self.fresh("o"), self.fresh("m")
        self.w(d, f"{o} = np.int64({self.operand(offset, offset.dtype, idx, g)})")
        self.w(d, f"{m} = {self.operand(mask, D.BOOL, idx, g) if mask is not None else 'True'}")
        if sv.counts_lanes:
            self.w(d, f"{sv.lanes} += {m}")
        if self.layout.checks and idx:
            self.w(d, f"if {sv.sample}:")
            self.w(d + 1, f"samp_off[{site}, f] = {o}")
            self.w(d + 1, f"samp_mask[{site}, f] = {m}")
        self.w(d, f"if {m}:")
        return o, m, d + 1

    def oob_code(self, d: int, site: int, o: str) -> None:
        # per program and site: lanes out of bounds, and the first one's offset
        self.w(d, f"if oob[p, {site}, 0] == 0:")
        self.w(d + 1, f"oob[p, {site}, 1] = {o}")
        self.w(d, f"oob[p, {site}, 0] += 1")

    def tracked(self, s: Any) -> Optional[tuple[str, int]]:
        """(base, STORE or LOAD) when checks track this access site's elements, else None."""
        if not self.layout.checks:
            return None
        if isinstance(s, Store):
            return None if s.atomic_add else (s.base, STORE)  # atomics may share elements by design
        base = self.base_of(s)
        return (base, LOAD) if base in self.layout.track_reads else None

    @staticmethod
    def run_vars(run: str) -> str:
        return f"{run}_lo, {run}_nx"

    @staticmethod
    def tracking_args(base: str) -> str:
        return ", ".join(f"{kind}_{base}" for kind in TRACKING_PARAMS)

    def track(self, d: int, s: Any, ob: str, run: str) -> None:
        # the common cases inline (the run grows; the thread records per element), the
        # rest (a run starts or breaks) in `tracking._break_run`
        base, kind = self.tracked(s)
        rows = f"w1_{base}, w2_{base}" if kind == STORE else f"r1_{base}, r2_{base}"
        self.w(d, f"if {ob} == {run}_nx:")
        self.w(d + 1, f"{run}_nx += 1")
        self.w(d, f"elif {run}_nx == {PER_ELEMENT}:")
        self.w(d + 1, f"_record({rows}, {ob}, pp)")
        self.w(d, "else:")
        self.w(d + 1, f"{self.run_vars(run)} = _break_run({ob}, pp, {self.run_vars(run)}, {kind}, "
                      f"{self.tracking_args(base)})")

    @staticmethod
    def loaded(raw: str, dtype: str) -> str:
        return {"fp16": f"_h2f({raw})", "bf16": f"_bf2f({raw})"}.get(dtype, raw)

    def load_code(self, v: Val, g: Group, idx: list, d: int, sv: SiteVars) -> None:
        base, site = v.attrs["base"], v.attrs["site"]
        name = self.name(v)
        if self.loop_kind == DENSE:
            self.w(d, f"{name} = {self.loaded(f'b_{base}[{sv.start} + f]', v.dtype)}")
            return
        offset, mask, other = v.args
        o, m, d1 = self.access_prologue(offset, mask, site, g, idx, d, sv)
        ob = self.fresh("ob")
        self.w(d1, f"{ob} = {o} + o_{base}")
        self.w(d1, f"if {ob} >= 0 and {ob} < n_{base}:")
        self.w(d1 + 1, f"{name} = {self.loaded(f'b_{base}[{ob}]', v.dtype)}")
        if self.tracked(v):
            self.track(d1 + 1, v, ob, sv.run)
        self.w(d1, "else:")
        self.w(d1 + 1, f"{name} = {D.literal(0, v.dtype)}")
        self.oob_code(d1 + 1, site, o)
        self.w(d, "else:")
        fill = self.operand(other, v.dtype, idx, g) if other is not None else D.literal(0, v.dtype)
        self.w(d + 1, f"{name} = {fill}")

    def stored(self, s: Store, element: str, idx: list, g: Group) -> str:
        """The value a store writes at `element`, in the storage's representation."""
        value = self.operand(s.value, s.elem, idx, g)
        if s.atomic_add:
            value = D.normalize(f"{self.loaded(f'b_{s.base}[{element}]', s.elem)} + {value}", s.elem)
        return {"fp16": f"_f2h({value})", "bf16": f"_f2bf({value})"}.get(s.elem, value)

    def store_code(self, s: Store, g: Group, idx: list, d: int, sv: SiteVars) -> None:
        if self.loop_kind == DENSE:
            element = f"{sv.start} + f"
            self.w(d, f"b_{s.base}[{element}] = {self.stored(s, element, idx, g)}")
            return
        o, m, d1 = self.access_prologue(s.offset, s.mask, s.site, g, idx, d, sv)
        ob = self.fresh("ob")
        stored = self.stored(s, ob, idx, g)
        self.w(d1, f"{ob} = {o} + o_{s.base}")
        self.w(d1, f"if {ob} >= 0 and {ob} < n_{s.base}:")
        self.w(d1 + 1, f"b_{s.base}[{ob}] = {stored}")
        if self.tracked(s):
            self.track(d1 + 1, s, ob, sv.run)
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
                flat = flat_index(tuple(shape[k] for k in kept), out_idx)
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
                self.w(depth, f"a{out.id}[{flat_index(shape, out_idx)}] = {self.name(a)}")

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


def generate(kir: KernelIR, layout: Layout, alias: dict) -> Emitter:
    """The emitter of one specialisation, its module source generated (`.source`)."""
    emitter = Emitter(kir, layout, alias)
    emitter.source = module_source(emitter)
    return emitter
