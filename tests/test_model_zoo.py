"""The model zoo: real models, built without downloads (random weights, tiny configs),
compiled for gxu on the session's target (emulator on a CPU machine, cuda on a GPU machine).

torchvision's `resnet18` (convolutions run as extern kernels), a transformers GPT-2 and BERT,
and `nn.TransformerEncoderLayer` in train mode and in eval mode (its fused fast path): each
forward equals eager on the backing device; each training step (loss and every gradient),
and an AMP training step under `torch.autocast("gxu", dtype=torch.bfloat16)`, is as close to
the step in float64 as eager gxu is (within 3x its error, `gxusim.report.run_case`: at batch
2 resnet18's step amplifies rounding far past any fixed fp32 tolerance, and on cuda its
TF32 convolutions add more). Every launch stays within the gxu spec.

The emulator JIT-compiles each new kernel (seconds each on a cold cache, as in CI), so the
default run keeps the cheapest model; the rest are marked `slow` (times at MARKS).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import gxusim
from gxusim import zoo
from gxusim.zoo import SEQUENCE, VOCAB, Autocast, with_dropout
from gxusim.report import run_case


def _skipping(make):
    """The builder, skipping the test where it needs a library that is not installed."""
    def build() -> nn.Module:
        try:
            return make()
        except zoo.MissingLibrary as missing:
            pytest.skip(str(missing))
    return build


ZOO = {name: (_skipping(make), shapes) for name, (make, shapes) in zoo.ZOO.items()}

# (model, training step?) -> marks. The emulator's cold run times on a 2-core machine (CI
# starts cold): encoder_layer forward 61 s, training step 98 s, AMP step 127 s; gpt2 forward
# 111 s, training step 204 s; bert forward 69 s, training step 145 s; resnet18 forward 75 s,
# training step 83 s; llama forward 35 s, mobilenet_v3_small forward 72 s (alone, one
# compile worker). The default run keeps the encoder layer's forward, its eval fast path and
# its AMP step, and the Llama's forward (~4 min); the rest are `slow`.
MARKS = {
    ("resnet18", False): [pytest.mark.slow],
    ("resnet18", True): [pytest.mark.slow],
    ("mobilenet_v3_small", False): [pytest.mark.slow],
    ("mobilenet_v3_small", True): [pytest.mark.slow],
    ("llama", True): [pytest.mark.slow],
    ("gpt2", False): [pytest.mark.slow],
    ("gpt2", True): [pytest.mark.slow],
    ("bert", False): [pytest.mark.slow],
    ("bert", True): [pytest.mark.slow],
    ("encoder_layer", True): [pytest.mark.slow],
}


@pytest.fixture(autouse=True)
def _fresh_compiles():
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def _check(result, launches: bool = True) -> None:
    assert result.launches or not launches, f"{result.name}: no gxu kernel was launched"
    assert not result.violations, result.violations
    assert all(launch.target == gxusim.current_target() for launch in result.launches)
    errors = [str(f) for launch in result.launches for f in launch.findings if f.severity == "error"]
    assert not errors, errors
    assert result.matches_eager, (f"{result.name}: max relative error {result.max_error} "
                                  f"(eager gxu's own: {result.eager_error})")


def _params(train: bool):
    return [pytest.param(name, marks=MARKS.get((name, train), [])) for name in ZOO]


@pytest.mark.parametrize("name", _params(train=False))
def test_forward_matches_eager(name):
    result = run_case(zoo.case(name, wrap=zoo.FORWARD_WRAP.get(name), make=ZOO[name][0]), "cpu")
    _check(result)
    if name == "resnet18":
        convolutions = [l for l in result.launches if l.policy == "extern" and "convolution" in l.kernel]
        assert convolutions, sorted({l.kernel for l in result.launches})


@pytest.mark.parametrize("name", _params(train=True))
def test_training_step_matches_eager(name):
    _check(run_case(zoo.case(name, train=True, make=ZOO[name][0]), "cpu", train=True))


def test_encoder_layer_eval_fast_path(monkeypatch):
    """nn.TransformerEncoderLayer in eval mode without autograd (a forward, as run_case runs
    it) takes its fused fast path (torch._transformer_encoder_layer_fwd) in eager; compiled
    for gxu it matches."""
    case = zoo.case("encoder_layer", label="encoder_layer_fast_path")
    calls = []
    fused = torch._transformer_encoder_layer_fwd
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd",
                        lambda *args, **kwargs: calls.append(1) or fused(*args, **kwargs))
    model, inputs = case.build("gxu")
    with torch.no_grad():
        model(*inputs)
    if not calls and torch.__version__ < "2.13":
        pytest.skip(f"torch {torch.__version__}'s encoder fast path takes cpu and cuda tensors only")
    assert calls, "eager gxu did not take the encoder layer's fast path"
    monkeypatch.undo()
    # Inductor has no lowering for the fused op: the whole layer is one fallback, no launch.
    _check(run_case(case, "cpu"), launches=False)


@pytest.mark.parametrize("name", [pytest.param("encoder_layer"),
                                  pytest.param("gpt2", marks=[pytest.mark.slow])])
def test_amp_training_step_matches_eager(name):
    """One training step under torch.autocast("gxu", dtype=torch.bfloat16), compiled, is as
    close to the step in float64 as the eager gxu step under autocast is (run_case's rule)."""
    result = run_case(zoo.case(name, train=True, wrap=Autocast, make=ZOO[name][0],
                               label=f"{name}_amp"), "cpu", train=True)
    _check(result)


def test_module_to_gxu_keeps_tied_weights():
    """Module._apply moves a shared parameter once, in place, where a CPU tensor and a gxu
    tensor are shallow-copy compatible (`a.data = b`), as between CPU and CUDA."""
    embedding, head = nn.Embedding(4, 3), nn.Linear(3, 4, bias=False)
    head.weight = embedding.weight
    moved = nn.ModuleDict(dict(embedding=embedding, head=head)).to("gxu")
    assert moved["head"].weight is moved["embedding"].weight
    assert moved["head"].weight.device.type == "gxu"
    back = moved.to("cpu")
    assert back["head"].weight is back["embedding"].weight and back["head"].weight.is_cpu


def _compiled_step_gradients(model: nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    step = torch.compile(lambda t: model(t).float().square().mean())
    loss = step(tokens)
    loss.backward()
    return [loss.detach()] + [p.grad.detach().clone() for p in model.parameters()
                              if p.grad is not None]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_a_training_step_with_dropout_runs_and_repeats_under_one_seed(name):
    """Dropout 0.1 everywhere (the kernels draw tl.rand): the compiled training step runs
    within the spec with no finding, its loss and gradients are finite, dropout changes
    them, and the same seed gives the same loss bit for bit (and the same gradients, bit for
    bit on the emulator)."""
    make, _ = ZOO[name]
    gxusim.clear_launches()
    with torch.random.fork_rng(device_type="gxu"):
        torch.manual_seed(0)
        model = with_dropout(make, 0.1)().to("gxu").train()
        tokens = torch.randint(0, VOCAB, (2, SEQUENCE), device="gxu")
        torch.manual_seed(1)
        first = _compiled_step_gradients(model, tokens)
        torch.manual_seed(1)
        again = _compiled_step_gradients(model, tokens)
        model.eval()
        without = _compiled_step_gradients(model, tokens)
    launches = [l for l in gxusim.launches() if l.policy != "extern"]
    assert any("rand" in (l.source or "") for l in launches), "no kernel drew random numbers"
    assert not [f for l in launches for f in l.findings if f.severity == "error"]
    assert all(torch.isfinite(g).all() for g in first)
    assert torch.equal(first[0], again[0]), "the same seed drew other dropout masks"
    if gxusim.target.active().name == "emulator":
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    else:  # a GPU's atomic adds (the embedding's backward) sum in any order
        torch.testing.assert_close(first, again, rtol=1e-5, atol=1e-7)
    assert not torch.equal(first[0], without[0])
