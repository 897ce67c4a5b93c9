"""Kernel traits: what a GXU kernel does, recorded by code generation, read by policies.

Inductor knows, while it writes a kernel, what each load and store touches (its buffer,
dtype, whether the index is contiguous, broadcast or indirect) and which reductions and
scans the kernel performs. `compiler.inductor_codegen` records those facts as a
`KernelTraits` in the kernel's `inductor_meta` (as `gxu_traits`), so they travel with the
generated module, its launches (`Launch.traits`) and the corpus, and a policy can choose a
config for the kernel it is given rather than for an element count alone.

The counts of the finished code (arithmetic and math calls per element, values live at
once) are taken from the code generator's own output once, when the kernel is written.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

# 32-bit words Triton's Philox generator carries per element through its rounds: its four
# counters (`triton.language.random.philox_impl`; the keys come from the seed, one a tile).
PHILOX_WORDS = 4


@dataclasses.dataclass(frozen=True)
class Access:
    """One load or store site of the kernel (each distinct buffer and index once)."""
    buffer: str  # the kernel argument: in_ptr0, out_ptr1, in_out_ptr0
    dtype: str  # torch dtype name: float32, bfloat16, int64
    bytes: int  # bytes of one element
    contiguous: bool  # the index has a unit stride along some tile axis
    broadcast: bool  # the index misses a tile axis: the same element serves several
    indirect: bool  # the address depends on loaded values (a gather or scatter)
    along_reduction: bool  # the index moves with the reduced axis (read once per chunk)
    # the index has a stride of -1 along a tile axis (a flip): neighbouring elements are
    # neighbours in memory, in descending order, so a warp's reads still fill whole sectors
    # though they cannot be vectorised
    reversed: bool = False

    @property
    def coalesced(self) -> bool:
        """A warp's elements along some tile axis are one run of memory, either way."""
        return self.contiguous or self.reversed


@dataclasses.dataclass(frozen=True)
class KernelTraits:
    """What one generated kernel does, per element of its iteration space."""
    loads: tuple[Access, ...] = ()
    stores: tuple[Access, ...] = ()
    reductions: tuple[str, ...] = ()  # reduction types, in order: sum, max, welford_reduce, ...
    scans: int = 0  # block scans (cumsum, cumprod, ...)
    chunk_loops: int = 0  # loops over reduction chunks (softmax 3, layernorm 2, a sum 1)
    flops: int = 0  # arithmetic, comparisons, selects and casts per element
    transcendentals: int = 0  # math calls per element (exp, tanh, rsqrt, ...)
    live_values: int = 0  # values alive at once along the code (the temporaries of one element)
    random_numbers: int = 0  # in-kernel random numbers per element (tl.rand, tl.randn, ...)

    @property
    def streams(self) -> int:
        """Distinct buffers the kernel moves per element: not broadcast, loaded or stored."""
        return len({a.buffer for a in self.loads + self.stores if not a.broadcast})

    @property
    def bytes_per_element(self) -> int:
        """Bytes moved per element of the iteration space by accesses that are not
        broadcast (a broadcast operand is served from cache)."""
        return sum(a.bytes for a in self.loads + self.stores if not a.broadcast)

    @property
    def streamed_load_bytes(self) -> int:
        """Bytes loaded per element of the iteration space by loads that are not broadcast:
        what a tile's loads bring in from memory, besides the operands it reuses."""
        return sum(a.bytes for a in self.loads if not a.broadcast)

    @property
    def chunk_load_bytes(self) -> int:
        """Bytes loaded per element of a reduction's tile by loads that move along the reduced
        axis and are not broadcast: what a pipelined chunk loop buffers of each chunk."""
        return sum(a.bytes for a in self.loads if a.along_reduction and not a.broadcast)

    @property
    def math_per_byte(self) -> float:
        """Math calls per byte moved: how far a kernel leans on its arithmetic units."""
        return self.transcendentals / max(1, self.bytes_per_element)

    @property
    def registers_per_element(self) -> int:
        """32-bit registers a thread keeps for each element of its tile at once: every load's
        value (a tile's loads are all issued before their uses, to hide memory latency;
        64-bit ones take two) and, in a looped reduction, each reduction's accumulator
        (carried across chunks; a Welford one keeps three). The temporaries between a load
        and a store are scheduled element by element and count once (`live_values`), except
        in a kernel that scans: a block scan takes every element of the tile at once, so
        what each element computes before it and uses after it is held for all of them.
        A random number is Triton's Philox run on the whole tile at once, round by round:
        its PHILOX_WORDS counter words are held for every element (a 16M-element dropout at
        64 elements a thread: 128 registers and 130 spilled words in ptxas's binary, where
        its one load and five temporaries alone would take 93)."""
        loaded = sum(max(1, -(-a.bytes // 4)) for a in self.loads)
        carried = sum(3 if "welford" in r else 1 for r in self.reductions) if self.chunk_loops else 0
        held = self.live_values if self.scans else 0
        return max(1, loaded + carried + held + PHILOX_WORDS * self.random_numbers)

    @property
    def gathers(self) -> bool:
        return any(a.indirect for a in self.loads)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Optional[dict]) -> Optional["KernelTraits"]:
        """The traits a kernel's `inductor_meta` carries, or None (a hand-written kernel)."""
        if not data:
            return None
        fields = {**data}
        fields["loads"] = tuple(Access(**a) for a in data.get("loads", ()))
        fields["stores"] = tuple(Access(**a) for a in data.get("stores", ()))
        fields["reductions"] = tuple(data.get("reductions", ()))
        return cls(**fields)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
