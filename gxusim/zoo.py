"""The model zoo: real models built without downloads (random weights, tiny configs), for
whole-model runs (`gxusim run MODEL`) and the zoo tests.

torchvision's `resnet18` and `mobilenet_v3_small` (their convolutions run as extern
kernels), transformers' GPT-2, BERT and a Llama (RMSNorm, rotary embeddings, SwiGLU, grouped
key-value heads), and `nn.TransformerEncoderLayer`. Each builds with dropout 0;
`with_dropout` sets it.
torchvision and transformers are optional: a model that needs one that is missing raises
`MissingLibrary`, naming it.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
from torch import nn

from .errors import InputError
from .models import Case, Logits, Shapes, import_torchvision

VOCAB, WIDTH, SEQUENCE = 128, 64, 16


class MissingLibrary(InputError):
    """A zoo model needs a library that is not installed."""


def _transformers():
    import_torchvision()  # transformers imports torchvision whenever it is installed
    try:
        import transformers
    except ModuleNotFoundError:
        raise MissingLibrary("this model needs transformers: pip install -e '.[test]'") from None
    return transformers


def _torchvision_model(name: str) -> nn.Module:
    torchvision = import_torchvision()
    if torchvision is None:
        raise MissingLibrary(f"{name} needs torchvision: pip install -e '.[test]'")
    return getattr(torchvision.models, name)(num_classes=10)


def resnet18() -> nn.Module:
    return _torchvision_model("resnet18")


def mobilenet_v3_small() -> nn.Module:
    return _torchvision_model("mobilenet_v3_small")


def gpt2() -> nn.Module:
    config = _transformers().GPT2Config(n_layer=2, n_head=2, n_embd=WIDTH, vocab_size=VOCAB,
                                        n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return Logits(_transformers().GPT2LMHeadModel(config))


def bert() -> nn.Module:
    config = _transformers().BertConfig(num_hidden_layers=2, num_attention_heads=2,
                                        hidden_size=WIDTH, intermediate_size=2 * WIDTH,
                                        vocab_size=VOCAB, max_position_embeddings=64,
                                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return Logits(_transformers().BertForMaskedLM(config))


def llama() -> nn.Module:
    config = _transformers().LlamaConfig(num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, hidden_size=WIDTH,
                                         intermediate_size=2 * WIDTH, vocab_size=VOCAB,
                                         max_position_embeddings=64, attention_dropout=0.0,
                                         bos_token_id=0, eos_token_id=0)
    return Logits(_transformers().LlamaForCausalLM(config))


def encoder_layer() -> nn.Module:
    return nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=2 * WIDTH, dropout=0.0,
                                      batch_first=True)


class TrainingMode(nn.Module):
    """Keeps its module in training mode. A forward runs as inference (no autograd), where
    an nn.TransformerEncoderLayer in eval mode takes its fused fast path, one op Inductor
    has no lowering for; in training mode, without dropout, Inductor compiles its attention
    and feed-forward."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module.train(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


class Autocast(nn.Module):
    """Runs its module under bf16 autocast on the device of its input: "gxu" for the
    compiled model, "cpu" for the eager reference."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return self.module(x)


# Input shapes of each model (its main input first): batch 2.
IMAGES: dict[str, Shapes] = {"cpu": ((2, 3, 32, 32),)}
TOKENS: dict[str, Shapes] = {"cpu": ((2, SEQUENCE),)}
SEQUENCES: dict[str, Shapes] = {"cpu": ((2, SEQUENCE, WIDTH),)}

ZOO: dict[str, tuple[Callable[[], nn.Module], dict[str, Shapes]]] = {
    "resnet18": (resnet18, IMAGES),
    "mobilenet_v3_small": (mobilenet_v3_small, IMAGES),
    "gpt2": (gpt2, TOKENS),
    "bert": (bert, TOKENS),
    "llama": (llama, TOKENS),
    "encoder_layer": (encoder_layer, SEQUENCES),
}
# A forward of the encoder layer runs it in training mode (see TrainingMode).
FORWARD_WRAP: dict[str, type[nn.Module]] = {"encoder_layer": TrainingMode}


def with_dropout(make: Callable[[], nn.Module], p: float) -> Callable[[], nn.Module]:
    """`make`, with every dropout probability set to `p`."""
    def build() -> nn.Module:
        model = make()
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
        return model
    return build


def _mode(make: Callable[[], nn.Module], train: bool, wrap: Optional[type[nn.Module]]
          ) -> nn.Module:
    model = make().train(train)
    return wrap(model) if wrap is not None else model


def case(name: str, train: bool = False, wrap: Optional[type[nn.Module]] = None,
         make: Optional[Callable[[], nn.Module]] = None, label: Optional[str] = None) -> Case:
    """The zoo model `name` as a `gxusim.models.Case` at its one size, "cpu" (a forward, or
    with `train` a training step; `wrap` around the model, `make` instead of its builder)."""
    if name not in ZOO:
        raise InputError(f"unknown zoo model {name!r}: choose from {sorted(ZOO)}")
    default_make, shapes = ZOO[name]

    def one_size(numel: int) -> Shapes:
        raise InputError(f"zoo model {name} has one size, 'cpu'")
    return Case(label or name, functools.partial(_mode, make or default_make, train, wrap), shapes,
                one_size, trainable=train, vocabulary=VOCAB if shapes is TOKENS else 0)
