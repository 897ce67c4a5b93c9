"""Machine code: the memory waits of a kernel's loops, read from its compiled SASS.

An unpipelined chunk loop (a looped reduction without `num_stages`) loads a chunk and must
wait for it before the accumulator takes it. How many of those waits a thread really has is
ptxas's decision, not the source's: it unrolls some chunk loops completely and issues many
chunks' loads before the first wait, and keeps others rolled with a wait every load or two
(a bf16 row sum on the H200: 108 ns a chunk unrolled on 4 warps, 436 ns rolled on 2). The
source, the plan and the spec cannot tell the two apart; the binary can.

`loop_code` disassembles a cubin (nvdisasm, which Triton ships beside ptxas), finds its
loops (backward branches) and walks one thread's in-order issue through each loop body,
twice over so that loads a body issues for its next pass count as in flight: a global
load's registers are ready one round trip after it issues, every other result at once, and
an instruction waits for the registers it reads. The steady-state length of a pass, in
round trips, is the waits a thread cannot overlap, each charged to the load it waited for.
`chunk_code` matches the kernel's chunk loops (the performance model's looped phases) to
those loops in program order by their loads and stores (a loop unrolled U times issues U
chunks' loads a pass); chunk loops unrolled completely are found in the tile loop's own
body, each with the waits of its own stretch of the body's loads. The same passes count
the words a thread spills to local memory and reloads (LDL, STL): what a chunk pays for
its spills, where ptxas's spill count says only how many registers went; and the
instructions a warp issues, which a pipelined chunk's copies share the SM's issue with.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from .. import cache

_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P[T0-9]+\s+)?(\S+)\s*(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_REGISTER = re.compile(r"\bR(\d+)(?:\.(64|128))?\b")
_TARGET = re.compile(r"(\.L_x_\d+)")
_GLOBAL_LOAD = "LDG"
_ASYNC_COPY = "LDGSTS"  # a pipelined chunk loop's copies (global to shared memory)
_COPY_BARRIER = "LDGDEPBAR"
_BLOCK_BARRIER = "BAR.SYNC"  # bar.sync: every warp of the block (a cross-warp reduction)
_LOCAL = ("LDL", "STL")
_GLOBAL_STORE = "STG"
_SYMBOL_BANK = "c[0x4]"  # constant bank of the module's global symbols (libdevice's tables)
# Instructions whose first operand is read, not written.
_NO_DESTINATION = ("ST", "RED", "ATOM", "BAR", "BRA", "EXIT", "RET", "CALL", "WARPSYNC",
                   "BSYNC", "BSSY", "NOP", "MEMBAR", "DEPBAR", "ERRBAR")


class LoopCode(NamedTuple):
    """One stretch of a kernel's machine code that runs over and over."""
    loads: int  # global loads and asynchronous copies per pass (instructions)
    round_trips: float  # memory waits per pass a thread cannot overlap (steady state)
    local_words: int = 0  # 4-byte words a pass stores to and loads from local memory (spills)
    stores: int = 0  # global stores per pass (instructions)
    instructions: int = 0  # instructions a warp issues per pass
    # Per load instruction (program order), the round trips of the pass spent waiting for
    # it: which of the loops unrolled into one body the waits belong to.
    load_waits: tuple[float, ...] = ()
    # Of `round_trips`, the waits for loads that were in flight across a block-wide barrier
    # (a block reduction's): the walk takes the reduction as instant, the GPU does not, so
    # most of such a wait is spent reducing (layernorm's weight, issued amid the reduction
    # of the row it scales).
    waits_across_barrier: float = 0.0


class MachineCode(NamedTuple):
    """What the performance model reads off a kernel's SASS (hashable: part of the
    binary's `Resources`)."""
    chunk_loops: tuple[LoopCode, ...]  # loops inside the tile loop, with loads, in order
    tile_body: LoopCode  # the tile loop's own body, its chunk loops left out

    @classmethod
    def from_json(cls, data: Sequence) -> "MachineCode":
        """Back from its JSON form (nested lists, as `json.dumps` writes the tuples)."""
        def loop(fields: Sequence) -> LoopCode:
            code = LoopCode(*fields)
            return code._replace(load_waits=tuple(code.load_waits))
        loops, body = data
        return cls(tuple(map(loop, loops)), loop(body))


def cuda_tool(name: str) -> Optional[str]:
    """Triton's bundled CUDA binary tool `name` (Triton 3.6 and 3.9 ship nvdisasm and
    cuobjdump), else one on PATH."""
    try:
        import triton
        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                               name)
        if os.access(bundled, os.X_OK):
            return bundled
    except ImportError:
        pass
    return shutil.which(name)


def _read_cubin(tool_name: str, option: str, cubin: bytes) -> Optional[str]:
    """What the CUDA tool prints for the cubin with `option`; None where the tool is
    missing or fails."""
    tool = cuda_tool(tool_name)
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        result = subprocess.run([tool, option, file.name], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


_RESOURCE_USAGE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> Optional[tuple[int, int, int]]:
    """(registers a thread, stack-frame bytes a thread (spilled words live there), shared
    bytes) of the cubin's kernel, as cuobjdump reports them; None without cuobjdump."""
    found = _RESOURCE_USAGE.search(_read_cubin("cuobjdump", "-res-usage", cubin) or "")
    if found is None:
        return None
    registers, stack, shared, local = map(int, found.groups())
    return registers, stack + local, shared


def disassemble(cubin: bytes) -> Optional[str]:
    """The cubin's SASS as nvdisasm prints it, or None where there is no nvdisasm."""
    return _read_cubin("nvdisasm", "-c", cubin)


@functools.cache
def _reader_version() -> str:
    """Changes whenever this module does: readings it stored before are read again."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]


def cubin_readings(cubin: bytes, machine_code: bool
                   ) -> tuple[Optional[tuple[int, int, int]], Optional["MachineCode"]]:
    """`resource_usage` of the cubin and, with `machine_code`, its `loop_code`: worked out
    once per cubin and kept in the "binaries" cache (`gxusim.cache`), since each reading
    runs a CUDA tool (about half a second); a file that does not read back is rewritten."""
    path = cache.cache_dir("binaries") / \
        f"{hashlib.sha256(cubin).hexdigest()[:32]}-{_reader_version()}.json"
    stored = cache.read_json(path)
    try:
        usage = tuple(stored["usage"]) if stored["usage"] is not None else None
        code = None
        if machine_code:
            code = MachineCode.from_json(stored["code"]) if stored["code"] is not None else None
        return usage, code
    except (KeyError, TypeError, ValueError):
        pass  # not read yet (or not its code), or unusable: read afresh below
    usage = resource_usage(cubin)
    sass = disassemble(cubin) if machine_code else None
    code = loop_code(sass) if sass else None
    entry = {"usage": usage}
    if machine_code:
        entry["code"] = code  # its tuples written as lists, which `from_json` reads back
    cache.write_json(path, {**stored, **entry})
    return usage, code


def _instructions(sass: str) -> tuple[list[tuple[str, str]], dict[str, int], set[int]]:
    """(opcode, operands) in address order, each label's instruction index, and the
    indices of the instructions under a predicate (`@P0`, `@!P1`)."""
    instructions, labels, guarded = [], {}, set()
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction:
            if instruction.group(1) and instruction.group(1).strip() not in ("@PT", "@UPT"):
                guarded.add(len(instructions))
            instructions.append((instruction.group(2), instruction.group(3)))
    return instructions, labels, guarded


def _slow_paths(instructions: Sequence[tuple[str, str]], labels: dict[str, int],
                guarded: set[int], loops: Sequence[tuple[int, int]]) -> set[int]:
    """Instructions a conditional forward branch skips where what it skips is a loop over a
    global table (its address from constant bank 4, the module's symbols, where a kernel's
    own pointers are its parameters, bank 0): a math call's slow path, run for arguments a
    kernel rarely sees. sinf's Payne-Hanek reduction for |x| >= 105615 is such a loop,
    inlined once per element a thread holds: of exp(-|x|) * sin(x)'s 80 instructions an
    element (H200, Triton 3.6) half are that reduction, which the kernel's inputs never
    reach. A chunk loop whose trip count is a kernel argument is skipped by such a branch
    too (when it runs no chunk), but reads no table."""
    slow: set[int] = set()
    for index, (opcode, operands) in enumerate(instructions):
        target = _TARGET.search(operands) if opcode.startswith("BRA") else None
        end = labels.get(target.group(1), -1) if target and index in guarded else -1
        if end > index and any(index < start and stop < end for start, stop in loops) and \
                any(_SYMBOL_BANK in operands for _, operands in instructions[index + 1:end]):
            slow.update(range(index + 1, end))
    return slow


def _registers(operand: str) -> set[int]:
    found: set[int] = set()
    for match in _REGISTER.finditer(operand):
        base, width = int(match.group(1)), {None: 1, "64": 2, "128": 4}[match.group(2)]
        found.update(range(base, base + width))
    return found


def _reads_writes(opcode: str, operands: str) -> tuple[set[int], set[int]]:
    """Registers an instruction reads and writes (a load's destination: as wide as the load)."""
    parts = [part.strip() for part in operands.split(",")] if operands else []
    if not parts:
        return set(), set()
    if opcode.startswith(_NO_DESTINATION):
        return set().union(*map(_registers, parts)), set()
    reads = set().union(*map(_registers, parts[1:])) if len(parts) > 1 else set()
    written = _registers(parts[0])
    if opcode.startswith("LD") and written:
        written = set(range(min(written), min(written) + _width(opcode)))
    return reads, written


def _waits(body: Sequence[tuple[str, str]], passes: int = 6
           ) -> tuple[float, tuple[float, ...], float]:
    """Round trips one steady-state pass through `body` takes (see the module docstring),
    how many of them each global load is waited for, and how many were waited for loads in
    flight across a block-wide barrier."""
    ready: dict[int, float] = {}
    waited_load: dict[int, int] = {}  # register -> the load that writes it
    issued_at: dict[int, int] = {}  # register -> barriers passed when its load issued
    per_load = [0.0] * _loads(body)
    across = 0.0
    now, marks, barriers = 0.0, [], 0
    for count in range(passes):
        load = 0
        for opcode, operands in body:
            reads, written = _reads_writes(opcode, operands)
            # the register ready last, of the load issued last where several tie
            latest = max(reads, key=lambda r: (ready.get(r, 0.0), waited_load.get(r, -1)),
                         default=None)
            start = max(now, ready.get(latest, 0.0)) if latest is not None else now
            if start > now and count >= 2 and latest in waited_load:
                per_load[waited_load[latest]] += start - now
                if issued_at.get(latest, barriers) < barriers:
                    across += start - now
            now = start
            barriers += opcode.startswith(_BLOCK_BARRIER)
            is_load = _is_load(opcode)
            waits = is_load and not opcode.startswith(_ASYNC_COPY)
            for register in written:
                ready[register] = now + (1.0 if waits else 0.0)
                if waits:
                    waited_load[register] = load
                    issued_at[register] = barriers
                else:
                    waited_load.pop(register, None)
            load += is_load
        marks.append(now)
    steady = passes - 2
    return (marks[-1] - marks[1]) / steady, tuple(w / steady for w in per_load), across / steady


def _is_load(opcode: str) -> bool:
    return opcode.startswith(_GLOBAL_LOAD) and not opcode.startswith(_COPY_BARRIER)


def _loads(body: Sequence[tuple[str, str]]) -> int:
    """Global loads and asynchronous copies (LDG, LDGSTS; not LDGDEPBAR, which only closes
    a group of copies)."""
    return sum(_is_load(opcode) for opcode, _ in body)


def _width(opcode: str) -> int:
    """4-byte words one memory instruction moves per thread."""
    return 4 if ".128" in opcode else 2 if ".64" in opcode else 1


def _local_words(body: Sequence[tuple[str, str]]) -> int:
    return sum(_width(opcode) for opcode, _ in body if opcode.startswith(_LOCAL))


def _loop(body: Sequence[tuple[str, str]]) -> LoopCode:
    round_trips, load_waits, across = _waits(body)
    return LoopCode(_loads(body), round_trips, _local_words(body),
                    sum(opcode.startswith(_GLOBAL_STORE) for opcode, _ in body), len(body),
                    load_waits, across)


@functools.lru_cache(maxsize=256)
def loop_code(sass: str) -> Optional[MachineCode]:
    """The tile loop and its chunk loops in a kernel's SASS; None without a loop."""
    instructions, labels, guarded = _instructions(sass)
    loops = sorted({(labels[target.group(1)], index)
                    for index, (opcode, operands) in enumerate(instructions)
                    if opcode.startswith("BRA") and (target := _TARGET.search(operands))
                    and labels.get(target.group(1), index + 1) <= index})
    if not loops:
        return None
    tile = max(loops, key=lambda loop: loop[1] - loop[0])
    slow = _slow_paths(instructions, labels, guarded, loops)
    innermost = [loop for loop in loops if loop != tile and not any(
        other != loop and loop[0] <= other[0] and other[1] <= loop[1] for other in loops)]
    chunk_loops = [loop for loop in innermost if tile[0] <= loop[0] and loop[1] <= tile[1]
                   and loop[0] not in slow and _loads(instructions[loop[0]:loop[1] + 1])]
    inside = {index for start, end in chunk_loops for index in range(start, end + 1)}

    def taken(start: int, end: int, skip: set[int]) -> list[tuple[str, str]]:
        return [instructions[i] for i in range(start, end + 1) if i not in skip]
    return MachineCode(tuple(_loop(taken(start, end, slow)) for start, end in chunk_loops),
                       _loop(taken(tile[0], tile[1], inside | slow)))


class ChunkLoop(NamedTuple):
    """A chunk loop as the kernel's source has it: what finds it in the machine code."""
    loads: float  # load instructions a thread issues per chunk
    chunks: int  # chunks per tile
    stores: bool  # whether it stores (layernorm's normalising pass; not its statistics pass)
    # A warp's instructions per chunk as estimated from the source (0: unknown): what tells
    # apart two loops that load alike (softmax's sum pass calls exp, its max pass does not).
    instructions: float = 0.0


class ChunkCode(NamedTuple):
    """What one chunk of a chunk loop costs a thread, as its machine code says."""
    round_trips: float  # memory waits it cannot overlap
    local_words: float  # 4-byte words it spills to local memory and reloads
    instructions: float = 0.0  # instructions a warp issues


def _per_chunk(loop: LoopCode, share: float) -> ChunkCode:
    return ChunkCode(loop.round_trips * share, loop.local_words * share,
                     loop.instructions * share)


def chunk_code(code: MachineCode, loops: Sequence[ChunkLoop]) -> tuple[Optional[ChunkCode], ...]:
    """Per chunk, for each of a tile's chunk loops with loads (program order); None for a
    loop not found.

    A loop of the machine code is a chunk loop's when it issues between one and all of that
    loop's chunks' loads a pass, and stores where that loop stores; chunk loops left without
    one were unrolled into the tile loop's body and share its waits, spills and instructions
    by their loads. Where ptxas kept some of a tile's chunk loops and unrolled others, and
    two of them look alike (softmax's max and sum passes load alike and store nothing), the
    kept loop is the one whose estimated instructions are nearest its own; without
    estimates nothing is found: which one was kept, loads and stores cannot tell."""
    found: list[Optional[ChunkCode]] = [None] * len(loops)
    signatures = [(loop.stores, round(loop.loads, 3)) for loop in loops]
    ambiguous = bool(code.chunk_loops) and len(code.chunk_loops) != len(loops) and \
        len(set(signatures)) < len(signatures)
    if ambiguous and not all(loop.instructions for loop in loops):
        return tuple(found)

    def unrolled(machine: LoopCode, source: ChunkLoop) -> float:
        return machine.loads / source.loads if source.loads else 0.0

    def matches(machine: LoopCode, source: ChunkLoop) -> bool:
        return 0.9 <= unrolled(machine, source) <= source.chunks + 0.01 and \
            (machine.stores > 0) == source.stores

    def distance(machine: LoopCode, index: int) -> float:
        per_chunk = machine.instructions / unrolled(machine, loops[index])
        return abs(math.log(max(per_chunk, 1.0) / max(loops[index].instructions, 1.0)))

    index = 0
    for machine in code.chunk_loops:
        candidates = [i for i in range(index, len(loops)) if matches(machine, loops[i])]
        if not candidates:
            index = len(loops)
            continue
        alike = [i for i in candidates if signatures[i] == signatures[candidates[0]]]
        chosen = min(alike, key=lambda i: distance(machine, i)) if ambiguous else candidates[0]
        found[chosen] = _per_chunk(machine, 1 / unrolled(machine, loops[chosen]))
        index = chosen + 1
    rest = [i for i, known in enumerate(found) if known is None]
    per_tile = sum(loops[i].loads * loops[i].chunks for i in rest)
    if not code.tile_body.loads or not per_tile:
        return tuple(found)
    waits = _body_waits(code.tile_body, [loops[i] for i in rest])
    for i, chunk_waits in zip(rest, waits):
        shared = _per_chunk(code.tile_body, loops[i].loads / per_tile)
        found[i] = shared if chunk_waits is None else shared._replace(round_trips=chunk_waits)
    return tuple(found)


def _body_waits(body: LoopCode, unrolled: Sequence[ChunkLoop]) -> list[Optional[float]]:
    """Per chunk, the waits of chunk loops unrolled into the tile loop's body, each from the
    loads it issued there, in program order (layernorm's statistics pass waits 6 times on
    its 32 chunks' loads, its normalising pass on each of its 32). Each loop's stretch of the body's loads is its share of the loads the loops issue (a
    thread's loads of less than 16 bytes are fractions of a load to the source's count and
    one instruction to the binary); None where those shares do not split the body's loads
    into whole stretches (then the loops share its waits by loads)."""
    total = sum(loop.loads * loop.chunks for loop in unrolled)
    stretches = [len(body.load_waits) * loop.loads * loop.chunks / total for loop in unrolled]
    if not body.load_waits or any(abs(n - round(n)) > 0.01 for n in stretches):
        return [None] * len(unrolled)
    ends = list(itertools.accumulate(round(n) for n in stretches))
    return [sum(body.load_waits[end - round(n):end]) / loop.chunks
            for loop, n, end in zip(unrolled, stretches, ends)]
