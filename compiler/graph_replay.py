"""CUDA graphs for compiled gxu graphs: `torch.compile(mode="reduce-overhead")` on the cuda
target replays each graph's launches instead of launching kernel by kernel.

Inductor captures CUDA graphs only for graphs on CUDA tensors (it skips gxu graphs as "multiple
devices"). When its `triton.cudagraphs` option is on (what mode="reduce-overhead" sets), the
gxu wrapper's `call` is wrapped by `replay_graphs` instead. Per size signature of the inputs:

* the first call runs as usual: Triton compiles, launches are planned, libraries initialise;
* the second captures the whole call (GXU kernels, extern kernels, the wrapper's buffers) in
  one CUDA graph and replays it; later calls only replay it.

Inputs whose memory did not move between those two calls (parameters, buffers, inputs used
again) are read in place; the others are copied at each call into a buffer the graph reads.
A call whose in-place input has moved (another tensor there) captures again, that input
taking a buffer from then on. A replay records again the launches its capture recorded, so
the launch records still say what ran (plans, checks and predictions were made at capture).
The outputs are the graph's own tensors, overwritten by the next call, as with Inductor's
CUDA graphs: clone what must outlive it.

Not captured (they run kernel by kernel, and say why once in the log): training graphs (the
next forward would overwrite the tensors saved for backward), graphs that mutate an input,
outputs that alias an input, inputs off gxu, timed launches (`GXUSIM_TIMING`), targets
without CUDA graphs (the emulator), and graphs whose capture fails (an op that synchronises).
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional, Protocol, Sequence

import torch

from gxusim import launch as launch_records
from gxusim import target as targets
from gxusim.device import backing_alias, is_gxu

log = logging.getLogger(__name__)

Call = Callable[[list], Any]


class Graph(Protocol):
    """What a captured graph must do (a CUDA graph; tests give one that calls again)."""

    def capture(self, call: Callable[[], Any]) -> Any: ...

    def replay(self) -> None: ...


class CUDAGraph:
    """A `torch.cuda.CUDAGraph` (its own memory pool: the outputs stay valid between calls)."""

    def __init__(self) -> None:
        self.graph = torch.cuda.CUDAGraph()

    def capture(self, call: Callable[[], Any]) -> Any:
        with torch.cuda.graph(self.graph):
            return call()

    def replay(self) -> None:
        self.graph.replay()


@dataclasses.dataclass
class _Captured:
    graph: Graph
    copies: list[tuple[int, torch.Tensor]]  # (input, the backing tensor of its buffer)
    in_place: dict[int, int]  # input -> the data pointer the graph reads it at
    outputs: Any
    records: list  # the launch records of one call

    def reads(self, inputs: Sequence[Any]) -> bool:
        """Whether the graph reads these inputs: each in-place one is where it was."""
        return all(inputs[i].data_ptr() == pointer for i, pointer in self.in_place.items())

    def replay(self, inputs: Sequence[Any]) -> Any:
        for i, buffer in self.copies:
            buffer.copy_(backing_alias(inputs[i]))
        self.graph.replay()
        launch_records.record_again(self.records)
        return self.outputs


def _signature(inputs: Sequence[Any]) -> tuple:
    return tuple((tuple(v.shape), v.stride(), v.dtype) if isinstance(v, torch.Tensor) else v
                 for v in inputs)


def _pointers(inputs: Sequence[Any]) -> dict[int, int]:
    return {i: v.data_ptr() for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)}


def refusal(inputs: Sequence[Any]) -> Optional[str]:
    """Why a call with these inputs cannot be captured, or None."""
    target = targets.active()
    if not target.captures_cuda_graphs:
        return f"the {target.name} target has no CUDA graphs"
    if targets.timing_enabled():
        return "launches are timed (GXUSIM_TIMING=1), which synchronises"
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor) and not is_gxu(value):
            return f"input {i} is on {value.device}, not gxu"
    return None


class GraphReplay:
    """A gxu wrapper's `call`, replayed from CUDA graphs (see the module's docstring)."""

    def __init__(self, call: Call, refused: Optional[str], new_graph: Callable[[], Graph]) -> None:
        self.call = call
        self.refused = refused  # why this graph runs kernel by kernel, once known
        self.new_graph = new_graph
        self.warmed: dict[tuple, dict[int, int]] = {}  # signature -> first call's pointers
        self.moved: dict[tuple, set[int]] = {}  # signature -> inputs copied into buffers
        self.graphs: dict[tuple, _Captured] = {}
        if refused:
            log.warning("gxu graph runs without CUDA graphs: %s", refused)

    def __call__(self, args: list) -> Any:
        if self.refused:
            return self.call(args)
        inputs = list(args)
        args.clear()  # as the wrapper's own call does: the caller's list holds no input
        key = _signature(inputs)
        captured = self.graphs.get(key)
        if captured is not None and captured.reads(inputs):
            return captured.replay(inputs)
        if key not in self.warmed:
            self.warmed[key] = _pointers(inputs)
            return self.call(inputs)
        moved = self.moved.setdefault(key, set())
        kept = captured.in_place if captured is not None else self.warmed[key]
        moved.update(i for i, pointer in kept.items() if inputs[i].data_ptr() != pointer)
        captured = self._capture(inputs, moved)
        if captured is None:
            return self.call(inputs)
        self.graphs[key] = captured
        return captured.replay(inputs)

    def _refuse(self, reason: str) -> None:
        self.refused = reason
        self.graphs.clear()
        log.warning("gxu graph runs without CUDA graphs: %s", reason)

    def _capture(self, inputs: list, moved: set[int]) -> Optional[_Captured]:
        reason = refusal(inputs)
        if reason:
            return self._refuse(reason)
        read = list(inputs)
        copies = []
        for i in sorted(moved):
            value = inputs[i]
            if 0 in value.stride() and value.numel() > 1:
                return self._refuse(f"input {i} overlaps itself (stride 0) and cannot be copied")
            read[i] = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                          device=value.device)
            copies.append((i, backing_alias(read[i])))
        graph = self.new_graph()
        try:
            with launch_records.collecting() as records:
                outputs = graph.capture(lambda: self.call(list(read)))
        except RuntimeError as error:  # something in the graph cannot be captured
            return self._refuse(f"capturing it failed: {str(error).splitlines()[0][:200]}")
        read_memory = {v.untyped_storage().data_ptr() for v in read if isinstance(v, torch.Tensor)}
        for position, output in enumerate(outputs):
            if isinstance(output, torch.Tensor) and \
                    output.untyped_storage().data_ptr() in read_memory:
                return self._refuse(f"output {position} aliases an input")
        return _Captured(graph, copies, {i: p for i, p in _pointers(inputs).items()
                                         if i not in moved}, outputs, records)


def replay_graphs(call: Call, refused: Optional[str] = None) -> GraphReplay:
    """What the wrapper of a gxu graph compiled with CUDA graphs on calls: `call`, replayed
    from CUDA graphs, unless `refused` (a reason known when it was compiled)."""
    return GraphReplay(call, refused, CUDAGraph)
