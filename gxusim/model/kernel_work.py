"""What a generated kernel computes per element, counted from its source (no run needed).

Inductor's Triton kernels compute their values in straight-line `tmpN = ...` statements
inside the tile loop; index arithmetic (`xindex`, masks) is the same kind in every kernel
and is left to the model's per-element issue term. Walking those statements' Python AST
gives the counts the performance model's arithmetic terms need:

* `flops`: arithmetic, comparisons, selects and casts per element;
* `transcendentals`: calls that expand to long instruction sequences on the GPU (exp, log,
  tanh, sqrt, erf, pow, trigonometry: libdevice / `tl_math` calls);
* `reductions`, `scans`: block-wide reductions and scans (a scan's chunks are serial: each
  chunk waits for the previous chunk's carry);
* `random_numbers`: in-kernel random numbers (`tl.rand`, `tl.randn`, `tl.randint`...), each
  a Philox generator run for the element.

The tile loop's phases, which the performance model times, are read by
`gxusim.model.phases`.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import textwrap

from .. import python_ast

# Function names (the last attribute of the call) that count as transcendentals, plain
# arithmetic, block reductions and scans.
TRANSCENDENTAL_CALLS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sin", "cos", "tan",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "sqrt",
    "rsqrt", "erf", "erfc", "erfinv", "pow", "lgamma", "digamma", "sigmoid", "cbrt",
})
ARITHMETIC_CALLS = frozenset({
    "where", "maximum", "minimum", "abs", "floor", "ceil", "trunc", "fma", "div_rn",
    "fmod", "signbit", "isnan", "isinf", "nearbyint", "round", "to", "bitwise_and",
    "bitwise_or", "bitwise_xor", "clamp", "sign", "copysign", "logical_and", "logical_or",
})
REDUCTION_CALLS = frozenset({"sum", "max", "min", "max2", "min2", "argmax", "argmin",
                             "welford", "reduce", "prod", "xor_sum", "any", "all"})
# A looped Welford reduction's per-element updates (one chunk's element into the running
# mean, m2 and weight; two partial triples merged): arithmetic, not a block reduction. The
# block reduction is `welford` after the loop.
WELFORD_UPDATES = frozenset({"welford_reduce", "welford_combine"})
SCAN_CALLS = frozenset({"associative_scan", "cumsum", "cumprod", "cummax", "cummin"})
RANDOM_CALLS = frozenset({"rand", "randn", "randint", "randint4x", "rand4x", "randn4x",
                          "randint64"})



@dataclasses.dataclass(frozen=True)
class KernelWork:
    """Operations per element of a tile, from the kernel's value statements."""
    flops: int = 0
    transcendentals: int = 0
    reductions: int = 0
    scans: int = 0
    random_numbers: int = 0


def call_name(node: ast.Call) -> str:
    function = node.func
    if isinstance(function, ast.Attribute):
        return function.attr
    return function.id if isinstance(function, ast.Name) else ""


def assigns_a_value(node: ast.AST, prefixes: tuple = ("tmp",)) -> bool:
    """`tmpN = ...` or `tmpN, = ...` (scans and multi-output reductions return tuples)."""
    if not isinstance(node, ast.Assign):
        return False
    names = [t for target in node.targets
             for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    return any(isinstance(n, ast.Name) and n.id.startswith(prefixes) for n in names)


def _value_statements(tree: ast.AST) -> list[ast.AST]:
    """Right-hand sides of value assignments and the values of `tl.store` calls."""
    values = []
    for node in ast.walk(tree):
        if assigns_a_value(node):
            values.append(node.value)
        elif isinstance(node, ast.Call) and call_name(node) == "store" and len(node.args) > 1:
            values.append(node.args[1])
    return values


def _operations(value: ast.AST) -> list[ast.AST]:
    """The nodes of a value expression, except inside loads (their address arithmetic is
    index work, not the kernel's arithmetic)."""
    nodes, pending = [], [value]
    while pending:
        node = pending.pop()
        nodes.append(node)
        if isinstance(node, ast.Call) and call_name(node) == "load":
            continue
        pending.extend(ast.iter_child_nodes(node))
    return nodes


def count_operations(value: ast.AST) -> dict[str, int]:
    """Each `KernelWork` count of one value expression."""
    counts = dict.fromkeys((field.name for field in dataclasses.fields(KernelWork)), 0)
    for node in _operations(value):
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.BoolOp)):
            counts["flops"] += 1
        elif isinstance(node, ast.Compare):
            counts["flops"] += len(node.ops)
        elif isinstance(node, ast.Call):
            name = call_name(node)
            if name in TRANSCENDENTAL_CALLS:
                counts["transcendentals"] += 1
            elif name in ARITHMETIC_CALLS or name in WELFORD_UPDATES:
                counts["flops"] += 1
            elif name in SCAN_CALLS:
                counts["scans"] += 1
            elif name in REDUCTION_CALLS:
                counts["reductions"] += 1
            elif name in RANDOM_CALLS:
                counts["random_numbers"] += 1
    return counts


@functools.lru_cache(maxsize=1024)
def kernel_work(source: str) -> KernelWork:
    """The per-element operation counts of one kernel's Python source."""
    totals: collections.Counter = collections.Counter()
    for value in _value_statements(python_ast.parse(textwrap.dedent(source))):
        totals.update(count_operations(value))
    return KernelWork(**totals)


def live_values(source: str) -> int:
    """The most `tmpN` values alive at once along the kernel's statements, in source order:
    each is alive from its assignment to its last use (what a thread keeps in registers per
    element of its tile, before the compiler's own scheduling)."""
    statements = [node for node in ast.walk(python_ast.parse(textwrap.dedent(source)))
                  if isinstance(node, ast.stmt) and not isinstance(
                      node, (ast.FunctionDef, ast.For, ast.While, ast.If, ast.With))]
    statements.sort(key=lambda node: (node.lineno, node.col_offset))
    born: dict[str, int] = {}
    last_use: dict[str, int] = {}
    for position, node in enumerate(statements):
        for name in ast.walk(node):
            if isinstance(name, ast.Name) and name.id.startswith("tmp"):
                if isinstance(name.ctx, ast.Store):
                    born.setdefault(name.id, position)
                else:
                    last_use[name.id] = position
    alive = [0] * (len(statements) + 1)
    for name, start in born.items():
        for position in range(start, last_use.get(name, start) + 1):
            alive[position] += 1
    return max(alive)
