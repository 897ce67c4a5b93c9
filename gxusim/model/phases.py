"""The phases of a kernel's tile loop, read from its source: what the performance model times.

`kernel_phases` reads the structure the performance model times (`gxusim.model.core`): the
tile loop's body split into *phases*, the statements at tile level and the body of each
`tl.range` loop over reduction chunks (a looped reduction; softmax has three, layernorm
two). For each phase: its loads and stores (the tile axes their index spans, element size
from the kernel's signature, whether the index is a small broadcast vector such as a bias
`x % 1024`, whether the address depends on another load: a gather), and the longest chain
of dependent operations one element goes through (arithmetic steps and libdevice calls,
weighed by their latency), counting only per-element work: values of a reduction's rows
(`tl.sum(...)[:, None]`, the rsqrt of a variance) are computed once per row and hoisted.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import re
import textwrap

from .. import python_ast
from ..spec import HardwareSpec, spec_value
from .kernel_work import (ARITHMETIC_CALLS, REDUCTION_CALLS, SCAN_CALLS, TRANSCENDENTAL_CALLS,
                          WELFORD_UPDATES, assigns_a_value, call_name, count_operations)

@dataclasses.dataclass(frozen=True)
class ChainWeights:
    """What the spec's [estimates] say an element's operations add to its dependency chain:
    a math call's expf's (`math_call_weights`, else `unmeasured_call_weight`), a division's
    (`division_weight`), a Welford update's steps (`welford_steps`), the times a scan runs
    its combine function (`scan_combines`), and an expf in steps (`expf_steps`), by which
    chains are compared."""
    calls: tuple
    unmeasured: float
    division: float
    welford: float
    scan_combines: float
    expf_steps: float

    @classmethod
    def of(cls, spec: HardwareSpec | None = None) -> "ChainWeights":
        """The spec's weights; without one, the spec fields' defaults (the H200's)."""
        return cls(*(spec_value(spec, name) for name in (
            "math_call_weights", "unmeasured_call_weight", "division_weight", "welford_steps",
            "scan_combines", "expf_steps")))

    @functools.cached_property
    def _by_name(self) -> dict[str, float]:
        return dict(self.calls)

    def call(self, name: str) -> float:
        return self._by_name.get(name, self.unmeasured)

    def length(self, steps: tuple) -> float:
        """A chain's length in steps: its arithmetic, and its expf's as steps."""
        return steps[0] + self.expf_steps * steps[1]


# A block size the kernel body fixes itself: persistent reductions' R0_BLOCK, no-x-dim
# reductions' XBLOCK = 1.
_STATIC_BLOCK = re.compile(r"^\s*(XBLOCK|YBLOCK|R0_BLOCK)\s*:\s*tl\.constexpr\s*=\s*(\d+)",
                           re.MULTILINE)
_SIGNATURE_POINTER = re.compile(r"'(\w+)': '\*(\w+)'")
_ELEMENT_BYTES = {"fp64": 8, "i64": 8, "u64": 8, "fp32": 4, "i32": 4, "u32": 4, "fp16": 2,
                  "bf16": 2, "i16": 2, "u16": 2, "fp8e4nv": 1, "fp8e5": 1, "i8": 1, "u8": 1,
                  "i1": 1}
_AXIS_NAMES = {"xindex": "x", "yindex": "y", "r0_index": "r", "r0_base": "r", "rindex": "r",
               "rbase": "r"}
_CONSTRUCTORS = frozenset({"full", "zeros", "arange"})
_BLOCK_AXES = {"XBLOCK": "x", "YBLOCK": "y", "R0_BLOCK": "r", "RBLOCK": "r"}
_MODULES = frozenset({"tl", "libdevice", "tl_math", "triton_helpers", "triton", "math"})


@dataclasses.dataclass(frozen=True)
class Access:
    """One `tl.load` or `tl.store` of a phase."""
    pointer: str
    axes: frozenset  # tile axes its index spans: "x", "y", "r"
    broadcast: bool  # index only through `axis % constant`: a small vector, served from cache
    element_bytes: int
    store: bool
    depth: int  # loads: 1 + the loads its address depends on (a gather: 2); stores: 0
    unit_axes: frozenset = frozenset()  # axes of the index's unit-stride term
    # (axis, n): the index follows that axis only through `axis // n`, so n neighbours
    # share each address (an embedding's token id, shared by the columns of its row)
    repeats: tuple = ()
    # a load's `eviction_policy`: "evict_first" (Inductor marks a value's last read so:
    # its lines go first), "evict_last" (a value read again, or read uncoalesced: its lines
    # outlast normal traffic), "" (none)
    eviction: str = ""
    # axes of the value it moves: its index's, and those its mask or a `tl.broadcast_to`
    # in its address widen it to (a per-row value loaded under the chunk's mask is a whole
    # chunk, as a pipelined loop buffers it)
    value_axes: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class Phase:
    """Statements of the tile loop that run together: at tile level, or a chunk loop's body."""
    looped: bool  # the body of a `tl.range` loop over reduction chunks (runs once per chunk)
    accesses: tuple = ()
    arithmetic_steps: float = 0.0  # dependent arithmetic ops on the longest per-element chain
    transcendental_steps: float = 0.0  # libdevice calls on that chain, in expf's
    reductions: int = 0  # block reductions (cross-warp exchanges), each once per row
    scans: int = 0  # block scans (serial across chunks)
    carried: int = 0  # block-shaped values a chunk loop carries from chunk to chunk (its
    # accumulators: a sum 1, Welford's mean, m2 and weight 3), each held in registers
    divisions: float = 0.0  # divisions on the chain (their reciprocals issue as MUFU ops)

    @property
    def axes(self) -> frozenset:
        return frozenset().union(*[a.axes for a in self.accesses]) if self.accesses else \
            frozenset("xr" if self.looped else "x")

    @property
    def transposed(self) -> bool:
        """Accesses of the same 2D block disagree on their contiguous axis: Triton converts
        the layout through shared memory (a transpose, a permute)."""
        return len({a.unit_axes for a in self.accesses if not a.broadcast and a.depth <= 1
                    and a.unit_axes and len(a.axes) > 1}) > 1

    @property
    def gathers_across(self) -> bool:
        """A gather whose rows run along another axis of the block than the indices naming
        them (an embedding's table rows along x, its token ids along the reduced axis)."""
        return any(a.depth > 1 for a in self.accesses) and \
            len({a.unit_axes for a in self.accesses
                 if not a.store and a.unit_axes and len(a.axes) > 1}) > 1


def _assigned(statements: list) -> set:
    """Names the statements assign (tuple targets included)."""
    return {node.id for statement in statements if isinstance(statement, ast.Assign)
            for target in statement.targets
            for node in (target.elts if isinstance(target, ast.Tuple) else [target])
            if isinstance(node, ast.Name)}


def _names(node: ast.AST) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _PhaseReader:
    """Walks one kernel's tile loop; `axes`/`broadcast`/`depth` follow index variables and
    loaded values, `chain` each value's (steps, axes) along its dependency chain."""

    def __init__(self, pointers: dict, reduction: bool, weights: ChainWeights,
                 combines: dict | None = None) -> None:
        self.pointers = pointers
        self.reduction = reduction
        self.weights = weights
        self.combines = combines or {}  # a scan's combine function -> its steps (`_steps_of`)
        self.axes: dict = {}
        self.broadcast: dict = {}
        self.repeats: dict = {}  # name -> {axis: n} for `name = axis_index // n`
        self.depth: dict = {}
        self.chain: dict = {}
        self.phases: list = []

    def per_element(self, axes: frozenset) -> bool:
        """A value that exists per tile element (in a reduction: per row and column)."""
        return "r" in axes if self.reduction else True

    def index_axes(self, node: ast.AST) -> tuple:
        axes, broadcast = set(), True
        for name in _names(node):
            if name in self.axes:
                axes |= self.axes[name]
                broadcast = broadcast and self.broadcast.get(name, False)
        return frozenset(axes), broadcast and bool(axes)

    def unit_axes(self, address: ast.AST) -> frozenset:
        terms, pending = [], [address]
        while pending:
            node = pending.pop()
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                pending += [node.left, node.right]
            else:
                terms.append(node)
        # A loaded value in the address (a gather's index) strides by whatever it holds.
        return frozenset().union(*[self.axes.get(t.id, frozenset()) for t in terms
                                   if isinstance(t, ast.Name) and not self.depth.get(t.id)])

    def access(self, call: ast.Call, store: bool) -> Access:
        address = call.args[0]
        pointers = [n for n in _names(address) if n in self.pointers]
        axes, broadcast = self.index_axes(address)
        depth = 0 if store else 1 + max([self.depth.get(n, 0) for n in _names(address)] + [0])
        size = _ELEMENT_BYTES.get(self.pointers.get(pointers[0], ""), 4) if pointers else 4
        eviction = next((keyword.value.value for keyword in call.keywords
                         if keyword.arg == "eviction_policy" and
                         isinstance(keyword.value, ast.Constant)), "")
        mask = call.args[2 if store else 1] if len(call.args) > (2 if store else 1) else next(
            (keyword.value for keyword in call.keywords if keyword.arg == "mask"), None)
        widened = {_BLOCK_AXES[n] for n in _names(address) if n in _BLOCK_AXES}
        value_axes = axes | widened | (self.index_axes(mask)[0] if mask is not None else set())
        return Access(pointers[0] if pointers else "", axes, broadcast, size, store, depth,
                      self.unit_axes(address), self.address_repeats(address, axes),
                      "" if store else eviction, frozenset(value_axes))

    def address_repeats(self, address: ast.AST, axes: frozenset) -> tuple:
        """(axis, n) for each axis the address follows only through `axis // n` names."""
        names = [n for n in _names(address) if n in self.axes]
        found = []
        for axis in sorted(axes):
            carriers = [n for n in names if axis in self.axes[n]]
            shared = [self.repeats.get(n, {}).get(axis) for n in carriers]
            if carriers and all(shared):
                found.append((axis, min(shared)))
        return tuple(found)

    def value(self, node: ast.AST, phase: dict) -> tuple:
        """(steps along the chain as (arithmetic, transcendental, divisions), axes) of an
        expression; adds its loads to the phase."""
        zero = (0.0, 0.0, 0.0)
        if isinstance(node, ast.Name):
            return self.chain.get(node.id, (zero, self.axes.get(node.id, frozenset())))
        if isinstance(node, ast.Call):
            name = call_name(node)
            if name == "load":
                phase["accesses"].append(self.access(node, store=False))
                return zero, self.index_axes(node.args[0])[0]
            if name == "arange":  # tl.arange(0, R0_BLOCK): the axis of that block
                return zero, frozenset(_BLOCK_AXES[n] for n in _names(node) if n in _BLOCK_AXES)
            if name in _CONSTRUCTORS:
                return zero, frozenset()
            operands = list(node.args)
            if isinstance(node.func, ast.Attribute) and not (
                    isinstance(node.func.value, ast.Name) and node.func.value.id in _MODULES):
                operands.append(node.func.value)  # a method: `tl.load(...).to(tl.float32)`
            parts = [self.value(a, phase) for a in operands]
            steps = max([p[0] for p in parts], key=self.weights.length, default=zero)
            axes = frozenset().union(*[p[1] for p in parts]) if parts else frozenset()
            if name in REDUCTION_CALLS:
                return steps, axes - {"r"}
            if not self.per_element(axes):
                return steps, axes
            if name in SCAN_CALLS:
                combine = self.combines.get(_combine_function(node), (1.0, 0.0, 0.0))
                return _plus(steps, *(self.weights.scan_combines * part for part in combine)), axes
            if name in TRANSCENDENTAL_CALLS:
                return _plus(steps, transcendental=self.weights.call(name)), axes
            if name in WELFORD_UPDATES:
                return _plus(steps, arithmetic=self.weights.welford, divisions=1.0), axes
            if name in ARITHMETIC_CALLS:
                return _plus(steps, arithmetic=1.0), axes
            return steps, axes
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
            children = ([node.left, node.right] if isinstance(node, ast.BinOp) else
                        [node.operand] if isinstance(node, ast.UnaryOp) else
                        [node.left, *node.comparators] if isinstance(node, ast.Compare) else
                        list(node.values))
            parts = [self.value(c, phase) for c in children]
            steps = max([p[0] for p in parts], key=self.weights.length)
            axes = frozenset().union(*[p[1] for p in parts])
            if self.per_element(axes):
                divide = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                steps = _plus(steps, transcendental=self.weights.division, divisions=1.0) \
                    if divide else \
                    _plus(steps, arithmetic=1.0)
            return steps, axes
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            return self.value(node.value, phase)
        if isinstance(node, ast.Tuple):
            parts = [self.value(e, phase) for e in node.elts]
            return (max([p[0] for p in parts], key=self.weights.length, default=zero),
                    frozenset().union(*[p[1] for p in parts]) if parts else frozenset())
        return zero, frozenset()

    def assign(self, statement: ast.Assign, phase: dict) -> None:
        loads_before = len(phase["accesses"])
        steps, axes = self.value(statement.value, phase)
        if not assigns_a_value(statement, prefixes=("tmp", "_tmp")):
            steps = (0.0, 0.0, 0.0)  # index arithmetic: the per-access cost, not the chain
        elif not self.per_element(axes):
            steps = (0.0, 0.0, 0.0)  # computed once per row: no part of an element's chain
        elif self.weights.length(steps) > self.weights.length(phase["chain"]):
            phase["chain"] = steps
        counts = count_operations(statement.value)
        phase["reductions"] += counts["reductions"]
        phase["scans"] += counts["scans"]
        new_loads = phase["accesses"][loads_before:]
        index_axes, broadcast = self.index_axes(statement.value)
        depth = max([a.depth for a in new_loads] +
                    [self.depth.get(n, 0) for n in _names(statement.value)] + [0])
        value = statement.value
        modulo = isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and \
            isinstance(value.right, ast.Constant)
        divided = isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv) and \
            isinstance(value.right, ast.Constant) and isinstance(value.left, ast.Name) and \
            value.left.id in _AXIS_NAMES
        for target in statement.targets:
            for node in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if not isinstance(node, ast.Name):
                    continue
                name = node.id
                if name in _AXIS_NAMES:
                    self.axes[name], self.broadcast[name] = frozenset(_AXIS_NAMES[name]), False
                else:
                    self.axes[name] = axes | index_axes
                    self.broadcast[name] = broadcast or modulo
                    self.repeats[name] = {_AXIS_NAMES[value.left.id]: int(value.right.value)} \
                        if divided else {}
                self.depth[name] = depth
                self.chain[name] = (steps, axes)

    def walk(self, statements: list, phase: dict) -> None:
        for statement in statements:
            if isinstance(statement, ast.For):
                inner = {"looped": True, "accesses": [], "chain": (0.0, 0.0, 0.0),
                         "reductions": 0, "scans": 0}
                self.phases.append(inner)
                before = set(self.chain)
                self.walk(statement.body, inner)
                inner["carried"] = sum(
                    1 for name in _assigned(statement.body) & before
                    if name.startswith(("tmp", "_tmp")) and self.per_element(self.axes[name]))
            elif isinstance(statement, ast.Assign):
                self.assign(statement, phase)
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call) \
                    and call_name(statement.value) == "store" and len(statement.value.args) > 1:
                steps, axes = self.value(statement.value.args[1], phase)
                if self.per_element(axes) and \
                        self.weights.length(steps) > self.weights.length(phase["chain"]):
                    phase["chain"] = steps
                counts = count_operations(statement.value.args[1])
                phase["reductions"] += counts["reductions"]
                phase["scans"] += counts["scans"]
                phase["accesses"].append(self.access(statement.value, store=True))


def _combine_function(scan: ast.Call) -> str:
    """The name of the function an `associative_scan` combines with (its third argument);
    "" for a scan whose combine is built in (`tl.cumsum`: one addition)."""
    combine = scan.args[2] if len(scan.args) > 2 else next(
        (keyword.value for keyword in scan.keywords if keyword.arg == "combine_fn"), None)
    return combine.id if isinstance(combine, ast.Name) else ""


def _steps_of(function: ast.FunctionDef, weights: ChainWeights) -> tuple:
    """(arithmetic, transcendental, divisions) steps of one call of a Triton function that
    a kernel calls, such as a scan's combine (a logcumsumexp's: a max, a min, an exp and
    a log1p), along its longest chain to what it returns."""
    reader = _PhaseReader({}, reduction=False, weights=weights)
    body = {"looped": False, "accesses": [], "chain": (0.0, 0.0, 0.0), "reductions": 0,
            "scans": 0}
    reader.walk(function.body, body)
    returned = [reader.value(statement.value, body)[0] for statement in function.body
                if isinstance(statement, ast.Return) and statement.value is not None]
    return max([body["chain"], *returned], key=weights.length)


def load_unit_stride_axes(source: str) -> frozenset:
    """The axes along which a kernel's streamed 2D loads (indexed by two tile axes, not
    broadcast) are contiguous: {"r"} for a row reduction, {"x"} for a column reduction,
    both where its loads disagree, none for a kernel without such loads."""
    try:
        phases = kernel_phases(source)
    except Exception:  # noqa: BLE001 - not a generated kernel's source: nothing known
        return frozenset()
    return frozenset().union(*[a.unit_axes for phase in phases for a in phase.accesses
                               if not a.store and not a.broadcast and len(a.axes) > 1])


def _plus(steps: tuple, arithmetic: float = 0.0, transcendental: float = 0.0,
          divisions: float = 0.0) -> tuple:
    return (steps[0] + arithmetic, steps[1] + transcendental, steps[2] + divisions)


def static_blocks(source: str) -> dict[str, int]:
    """Block sizes the kernel's body fixes itself (not launch parameters)."""
    return {block: int(size) for block, size in _STATIC_BLOCK.findall(source)}


@functools.lru_cache(maxsize=1024)
def kernel_phases(source: str, weights: ChainWeights = ChainWeights.of()) -> tuple:
    """The phases of a generated kernel's tile loop (see the module docstring), from its
    source: the `@triton.jit` function, with its decorators when the pointer types are to be
    read from the signature (otherwise every element is taken as 4 bytes), then any Triton
    functions it calls (a scan's combine function: each element goes through it
    `scan_combines` times; without its source, one addition). Chains are weighed by `weights`
    (`ChainWeights.of(spec)`; by default the spec fields' defaults)."""
    pointers = dict(_SIGNATURE_POINTER.findall(source))
    text = textwrap.dedent(source[source.index("def "):] if "def " in source else source)
    function, *called = [n for n in python_ast.parse(text).body if isinstance(n, ast.FunctionDef)]
    parameters = {a.arg for a in function.args.args}
    reader = _PhaseReader(pointers, reduction="r0_numel" in parameters, weights=weights,
                          combines={f.name: _steps_of(f, weights) for f in called})
    loop = next((n for n in function.body if isinstance(n, ast.For)), None)
    top = {"looped": False, "accesses": [], "chain": (0.0, 0.0, 0.0), "reductions": 0,
           "scans": 0, "carried": 0}
    reader.phases.append(top)
    reader.walk(loop.body if loop is not None else function.body, top)
    return tuple(Phase(p["looped"], tuple(p["accesses"]), p["chain"][0], p["chain"][1],
                       p["reductions"], p["scans"], p["carried"], p["chain"][2])
                 for p in reader.phases)
