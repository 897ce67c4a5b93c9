"""The model suite: the seed's examples plus small real models, for tests, demo and benchmarks.

Each `Case` builds a module (or function) and its inputs at a size scale ("cpu": small
enough for the emulator, "gpu": the seed's 100M-element sizes), on any device.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
from torch import nn


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


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make_model: Callable[[], nn.Module]
    make_inputs: Callable[[str, torch.dtype], tuple[torch.Tensor, ...]]  # (scale, dtype)
    trainable: bool = False  # has parameters: a training step is meaningful

    def build(self, device: str, scale: str = "cpu", dtype: torch.dtype = torch.float32,
              seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(seed)
        model = self.make_model().to(dtype)
        inputs = self.make_inputs(scale, dtype)
        return model.to(device), tuple(t.to(device) for t in inputs)


def _vector(n_cpu: int, n_gpu: int, count: int = 1) -> Callable[[str, torch.dtype], tuple]:
    return lambda scale, dtype: tuple(torch.randn(n_cpu if scale == "cpu" else n_gpu, dtype=dtype)
                                      for _ in range(count))


def _matrix(cpu: tuple[int, ...], gpu: tuple[int, ...]) -> Callable[[str, torch.dtype], tuple]:
    return lambda scale, dtype: (torch.randn(cpu if scale == "cpu" else gpu, dtype=dtype),)


def _tokens(scale: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 1000, (8, 16) if scale == "cpu" else (256, 128)),)


SUITE: tuple[Case, ...] = (
    Case("add_relu", AddRelu, _vector(1 << 16, 100_000_000, count=2)),
    Case("mul_relu", MulRelu, _vector(1 << 16, 100_000_000)),
    Case("tanh_gelu", TanhGelu, _vector(1 << 16, 100_000_000)),
    Case("transpose", Transpose, _matrix((96, 160), (8192, 8192))),
    Case("row_sum", RowSum, _matrix((96, 3000), (16384, 8192))),
    Case("cumsum", CumulativeSum, _matrix((8, 20000), (64, 100000))),
    Case("mlp", MLP, _matrix((32, 64), (4096, 64)), trainable=True),
    Case("transformer_block", TransformerBlock, _matrix((2, 16, 64), (32, 256, 64)), trainable=True),
    Case("embedding_classifier", EmbeddingClassifier, _tokens, trainable=True),
)
CASES = {case.name: case for case in SUITE}
