"""Machine code: the memory waits of a kernel's loops, read from its compiled SASS.

An unpipelined chunk loop (a looped reduction without `num_stages`) loads a chunk and must
wait for it before the accumulator takes it. How many of those waits a thread really has is
ptxas's decision, not the source's: it unrolls some chunk loops completely and issues many
chunks' loads before the first wait, and keeps others rolled with a wait every load or two.
On the H200 the row sum 32768x4096 in bf16, 8 rows of 256 a chunk: on 4 warps all 16 chunks'
32 loads sit in the tile loop's body, waited for in 7 waves, 108 ns a chunk; on 2 warps the
loop stays rolled, two waits a chunk, 436 ns. The source, the plan and the spec cannot tell
the two apart; the binary can.

`loop_code` disassembles a cubin (nvdisasm, which Triton ships beside ptxas), finds its
loops (backward branches) and walks one thread's in-order issue through each loop body,
twice over so that loads a body issues for its next pass count as in flight: a global
load's registers are ready one round trip after it issues, every other result at once, and
an instruction waits for the registers it reads. The steady-state length of a pass, in
round trips, is the waits a thread cannot overlap. `chunk_round_trips` matches the kernel's
chunk loops (the performance model's looped phases) to those loops in program order by
their loads (a loop unrolled U times issues U chunks' loads a pass); a chunk loop unrolled
completely is found in the tile loop's own body, whose waits its chunks share. The same
passes count the words a thread spills to local memory and reloads (LDL, STL): what a
chunk pays for its spills, where ptxas's spill count says only how many registers went.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from typing import NamedTuple, Optional, Sequence

_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s*(?:@!?U?P[T0-9]+\s+)?(\S+)\s*(.*?)\s*;")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_REGISTER = re.compile(r"\bR(\d+)(?:\.(64|128))?\b")
_TARGET = re.compile(r"(\.L_x_\d+)")
_GLOBAL_LOAD = "LDG"
_ASYNC_COPY = "LDGSTS"  # a pipelined chunk loop's copies (global to shared memory)
_COPY_BARRIER = "LDGDEPBAR"
_LOCAL = ("LDL", "STL")
# Instructions whose first operand is read, not written.
_NO_DESTINATION = ("ST", "RED", "ATOM", "BAR", "BRA", "EXIT", "RET", "CALL", "WARPSYNC",
                   "BSYNC", "BSSY", "NOP", "MEMBAR", "DEPBAR", "ERRBAR")


class LoopCode(NamedTuple):
    """One stretch of a kernel's machine code that runs over and over."""
    loads: int  # global loads and asynchronous copies per pass (instructions)
    round_trips: float  # memory waits per pass a thread cannot overlap (steady state)
    local_words: int = 0  # 4-byte words a pass stores to and loads from local memory (spills)


class MachineCode(NamedTuple):
    """What the performance model reads off a kernel's SASS (hashable: part of the
    binary's `Resources`)."""
    chunk_loops: tuple[LoopCode, ...]  # loops inside the tile loop, with loads, in order
    tile_body: LoopCode  # the tile loop's own body, its chunk loops left out

    @classmethod
    def from_json(cls, data: Sequence) -> "MachineCode":
        """Back from its JSON form (nested lists, as `json.dumps` writes the tuples)."""
        loops, body = data
        return cls(tuple(LoopCode(*loop) for loop in loops), LoopCode(*body))


def _nvdisasm() -> Optional[str]:
    """Triton's bundled nvdisasm (both Triton 3.6 and 3.9 ship it), else one on PATH."""
    try:
        import triton
        bundled = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                               "nvdisasm")
        if os.access(bundled, os.X_OK):
            return bundled
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def disassemble(cubin: bytes) -> Optional[str]:
    """The cubin's SASS as nvdisasm prints it, or None where there is no nvdisasm."""
    tool = _nvdisasm()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        result = subprocess.run([tool, "-c", file.name], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


def _instructions(sass: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(opcode, operands) in address order, and each label's instruction index."""
    instructions, labels = [], {}
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction:
            instructions.append((instruction.group(1), instruction.group(2)))
    return instructions, labels


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


def _round_trips(body: Sequence[tuple[str, str]], passes: int = 6) -> float:
    """Round trips one steady-state pass through `body` takes (see the module docstring)."""
    ready: dict[int, float] = {}
    now, marks = 0.0, []
    for _ in range(passes):
        for opcode, operands in body:
            reads, written = _reads_writes(opcode, operands)
            now = max([now, *(ready.get(r, 0.0) for r in reads)])
            waits = opcode.startswith(_GLOBAL_LOAD) and not opcode.startswith(_ASYNC_COPY)
            done = now + (1.0 if waits else 0.0)
            for register in written:
                ready[register] = done
        marks.append(now)
    return (marks[-1] - marks[1]) / (passes - 2)


def _loads(body: Sequence[tuple[str, str]]) -> int:
    """Global loads and asynchronous copies (LDG, LDGSTS; not LDGDEPBAR, which only closes
    a group of copies)."""
    return sum(opcode.startswith(_GLOBAL_LOAD) and not opcode.startswith(_COPY_BARRIER)
               for opcode, _ in body)


def _width(opcode: str) -> int:
    """4-byte words one memory instruction moves per thread."""
    return 4 if ".128" in opcode else 2 if ".64" in opcode else 1


def _local_words(body: Sequence[tuple[str, str]]) -> int:
    return sum(_width(opcode) for opcode, _ in body if opcode.startswith(_LOCAL))


def _loop(body: Sequence[tuple[str, str]]) -> LoopCode:
    return LoopCode(_loads(body), _round_trips(body), _local_words(body))


@functools.lru_cache(maxsize=256)
def loop_code(sass: str) -> Optional[MachineCode]:
    """The tile loop and its chunk loops in a kernel's SASS; None without a loop."""
    instructions, labels = _instructions(sass)
    loops = sorted({(labels[target.group(1)], index)
                    for index, (opcode, operands) in enumerate(instructions)
                    if opcode.startswith("BRA") and (target := _TARGET.search(operands))
                    and labels.get(target.group(1), index + 1) <= index})
    if not loops:
        return None
    tile = max(loops, key=lambda loop: loop[1] - loop[0])
    innermost = [loop for loop in loops if loop != tile and not any(
        other != loop and loop[0] <= other[0] and other[1] <= loop[1] for other in loops)]
    chunk_loops = [loop for loop in innermost if tile[0] <= loop[0] and loop[1] <= tile[1]
                   and _loads(instructions[loop[0]:loop[1] + 1])]
    inside = {index for start, end in chunk_loops for index in range(start, end + 1)}
    rest = [instructions[i] for i in range(tile[0], tile[1] + 1) if i not in inside]
    return MachineCode(tuple(_loop(instructions[start:end + 1]) for start, end in chunk_loops),
                       _loop(rest))


class ChunkCode(NamedTuple):
    """What one chunk of a chunk loop costs a thread, as its machine code says."""
    round_trips: float  # memory waits it cannot overlap
    local_words: float  # 4-byte words it spills to local memory and reloads


def chunk_code(code: MachineCode, loads_per_chunk: Sequence[float],
               chunks: Sequence[int]) -> tuple[Optional[ChunkCode], ...]:
    """Per chunk, for each of a tile's chunk loops with loads (program order), given each
    one's load instructions a thread issues per chunk and its chunks per tile; None for a
    loop not found.

    A loop of the machine code is a chunk loop's when it issues between one and all of that
    loop's chunks' loads a pass; chunk loops left without one were unrolled into the tile
    loop's body and share its waits and spills by their loads. Where ptxas kept some of a
    tile's chunk loops and unrolled others, nothing is found: loops that load alike (a
    layernorm's two passes over its rows) cannot be told apart."""
    found: list[Optional[ChunkCode]] = [None] * len(loads_per_chunk)
    if code.chunk_loops and len(code.chunk_loops) != len(loads_per_chunk):
        # Some chunk loops kept, some unrolled: which is which, their loads cannot tell
        # where two loops load alike (layernorm's statistics pass and its normalising pass).
        return tuple(found)
    phase = 0
    for loop in code.chunk_loops:
        while phase < len(loads_per_chunk):
            unrolled = loop.loads / loads_per_chunk[phase] if loads_per_chunk[phase] else 0.0
            phase += 1
            if 0.9 <= unrolled <= chunks[phase - 1] + 0.01:
                found[phase - 1] = ChunkCode(loop.round_trips / unrolled,
                                             loop.local_words / unrolled)
                break
    rest = [i for i, known in enumerate(found) if known is None]
    per_tile = sum(loads_per_chunk[i] * chunks[i] for i in rest)
    if not code.tile_body.loads or not per_tile:
        return tuple(found)
    for i in rest:
        share = loads_per_chunk[i] * chunks[i] / per_tile / max(1, chunks[i])
        found[i] = ChunkCode(code.tile_body.round_trips * share,
                             code.tile_body.local_words * share)
    return tuple(found)
