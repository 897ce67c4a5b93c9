"""The model suite: the seed's examples plus small real models, for tests, demo and benchmarks.

Each `Case` builds a module (or function) and its inputs at a named scale ("cpu": small
enough for the emulator, "gpu": the seed's 100M-element sizes) or at any size, on any device.
A case runs as a forward (inference, `step_mode`) or as a training step.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, ContextManager, Iterable, Union

import torch
from torch import nn

from .errors import InputError


class AddRelu(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x + y).relu()


class MulRelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).relu()


class TanhGelu(nn.Module):
    """The seed's GELU: nine eager kernels, one fused kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class Transpose(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous() * 2


class RowSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


class CumulativeSum(nn.Module):
    """A scan along long rows: Inductor would split it across programs on CUDA."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(dim=-1)


class MLP(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerBlock(nn.Module):
    """Pre-norm block: layernorm, causal attention with softmax, GELU MLP, residuals."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).tril()
        attention = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((attention @ v).transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class EmbeddingClassifier(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(tokens).mean(dim=1)).log_softmax(dim=-1)


class Logits(nn.Module):
    """A transformers model as a module of one tensor in (token ids), one tensor out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens).logits


Shapes = tuple[tuple[int, ...], ...]
Scale = Union[str, int]  # a named scale ("cpu", "gpu") or elements of the main input


@dataclasses.dataclass(frozen=True)
class Case:
    """A model and its inputs at a named scale or at any size.

    `presets` names the suite's fixed scales ("cpu": small enough for the emulator, "gpu":
    the seed's sizes); `scaled(n)` gives input shapes whose main (first) input has about `n`
    elements, for sweeps over sizes (`gxusim sweep --sizes`).
    """
    name: str
    make_model: Callable[[], nn.Module]
    presets: dict[str, Shapes]
    scaled: Callable[[int], Shapes]
    trainable: bool = False  # has parameters: a training step is meaningful
    vocabulary: int = 0  # > 0: inputs are token ids below it, not floats

    def shapes(self, scale: Scale) -> Shapes:
        if isinstance(scale, int) and not isinstance(scale, bool):
            if scale < 1:
                raise ValueError(f"model {self.name}: size must be a positive number of "
                                 f"elements, not {scale}")
            return self.scaled(scale)
        if scale not in self.presets:
            raise ValueError(f"model {self.name}: unknown scale {scale!r}; use "
                             f"{sorted(self.presets)} or a number of elements")
        return self.presets[scale]

    def size(self, scale: Scale) -> int:
        """Elements of the main input at `scale`."""
        return math.prod(self.shapes(scale)[0])

    def make_inputs(self, scale: Scale, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        if self.vocabulary:
            return tuple(torch.randint(0, self.vocabulary, shape) for shape in self.shapes(scale))
        return tuple(torch.randn(shape, dtype=dtype) for shape in self.shapes(scale))

    def build(self, device: str, scale: Scale = "cpu", dtype: torch.dtype = torch.float32,
              seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(seed)
        model = self.make_model().to(dtype)
        inputs = self.make_inputs(scale, dtype)
        return model.to(device), tuple(t.to(device) for t in inputs)


def step_mode(train: bool) -> ContextManager:
    """Autograd for a training step; none for a forward, which is inference. Compiled with
    autograd on, a forward is a training step's forward: AOTAutograd traces the joint graph
    and Inductor compiles its forward partition, which stores the activations a backward
    would need and fuses less (the transformer block's forward: 10 GXU kernels with its
    mask built apart, against 8 in inference, and a compile a third longer)."""
    return torch.enable_grad() if train else torch.no_grad()


VOCAB = 1000


def _vectors(count: int = 1) -> Callable[[int], Shapes]:
    return lambda n: ((n,),) * count


def _rows_of(width: int) -> Callable[[int], Shapes]:
    """Rows of a fixed width (one shorter row when `n` is under the width)."""
    return lambda n: ((max(1, n // width), min(n, width)),)


def _square(n: int) -> Shapes:
    side = 1 << (max(0, n.bit_length() - 1) // 2)
    return ((side, max(1, n // side)),)


def _long_rows(n: int) -> Shapes:
    """Up to 64 rows of at least 1,024 elements: scans along long rows."""
    rows = min(64, max(1, n // 1024))
    return ((rows, max(1, n // rows)),)


def _batches_of(item: tuple[int, ...]) -> Callable[[int], Shapes]:
    return lambda n: ((max(1, n // math.prod(item)), *item),)


SUITE: tuple[Case, ...] = (
    Case("add_relu", AddRelu, {"cpu": ((1 << 16,),) * 2, "gpu": ((100_000_000,),) * 2},
         _vectors(2)),
    Case("mul_relu", MulRelu, {"cpu": ((1 << 16,),), "gpu": ((100_000_000,),)}, _vectors()),
    Case("tanh_gelu", TanhGelu, {"cpu": ((1 << 16,),), "gpu": ((100_000_000,),)}, _vectors()),
    Case("transpose", Transpose, {"cpu": ((96, 160),), "gpu": ((8192, 8192),)}, _square),
    Case("row_sum", RowSum, {"cpu": ((96, 3000),), "gpu": ((16384, 8192),)}, _rows_of(8192)),
    Case("cumsum", CumulativeSum, {"cpu": ((8, 20000),), "gpu": ((64, 100000),)}, _long_rows),
    Case("mlp", MLP, {"cpu": ((32, 64),), "gpu": ((4096, 64),)}, _rows_of(64), trainable=True),
    Case("transformer_block", TransformerBlock, {"cpu": ((2, 16, 64),), "gpu": ((32, 256, 64),)},
         _batches_of((64, 64)), trainable=True),
    Case("embedding_classifier", EmbeddingClassifier, {"cpu": ((8, 16),), "gpu": ((256, 128),)},
         _rows_of(128), trainable=True, vocabulary=VOCAB),
)
CASES = {case.name: case for case in SUITE}


_torchvision_ops: "torch.library.Library | None" = None  # kept alive: see import_torchvision


def import_torchvision():
    """torchvision, or None when it is not installed.

    PyPI's torchvision wheels are CUDA builds: beside the CPU build of torch their `_C`
    extension does not load, and the import stops at the fake registration of
    `torchvision::nms` ("operator torchvision::nms does not exist"). The models are pure
    Python and need none of its C++ ops, so the two operators whose registration is
    unconditional get a schema (no kernel) and the import goes through. transformers
    imports torchvision whenever it is installed, so it needs this too.
    """
    global _torchvision_ops
    try:
        import torchvision
    except ModuleNotFoundError:
        return None
    except RuntimeError as error:
        if "torchvision::" not in str(error) or _torchvision_ops is not None:
            raise
        _torchvision_ops = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            _torchvision_ops.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision
    return torchvision


def require_models(names: Iterable[str]) -> None:
    """Refuse names that are not in the suite, naming them and the choices."""
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        raise InputError(f"unknown model(s) {unknown}; choose from {sorted(CASES)}")
