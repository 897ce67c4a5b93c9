"""Rebuild the kernel corpus: every GXU kernel Inductor generates for a set of real workloads.

Each workload (torchvision classifiers, transformers decoders and encoders, losses,
`torch.optim` steps) is compiled for gxu through the real pipeline (Dynamo, AOTAutograd,
Inductor, GXU code generation) on FakeTensors at realistic sizes, with nothing executed
(`gxusim.predict`'s mode), as a forward (inference), a training step (forward and backward),
or an optimizer step. Every kernel launch is kept with its module source as Inductor wrote
it, its sizes, its arguments' dtypes, shapes and strides, and the workloads it came from.

Identical kernels (the same code at the same sizes, whatever Inductor named them) are kept
once; a code seen at more than MAX_SIZES size signatures keeps the smallest, the largest and
those between them evenly. Each kernel's part, `fit` or `test`, is a hash of its code and
sizes (`corpus.part_of`), so it never changes while the kernel does not: rules, constants and
model terms are chosen on the fit part, and the test part is only measured.

    python benchmarks/corpus/build.py [--out benchmarks/corpus/kernels.jsonl] [--only NAME ...]
    python benchmarks/corpus/build.py --refresh-counts   # recount the stored kernels' traits

Takes about 15 minutes on a 2-core machine (all compile time).
"""
from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from tqdm import tqdm

import gxusim
from gxusim import corpus
from gxusim.compiler import launcher
from gxusim.compiler.inductor_registration import kernels_loaded_in_this_process
from gxusim.model.kernel_work import kernel_work, live_values
from gxusim.models import Logits, import_torchvision

HERE = Path(__file__).resolve().parent
MAX_SIZES = 4
F32, BF16 = torch.float32, torch.bfloat16


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model and its inputs, compiled in `mode`: "forward", "train" or an optimizer's name."""
    name: str
    make: Callable[[], nn.Module]
    inputs: tuple[tuple[tuple[int, ...], Any], ...]  # (shape, dtype or vocabulary size)
    mode: str = "forward"
    dtype: torch.dtype = F32

    @property
    def label(self) -> str:
        return f"{self.name}/{self.mode}/{str(self.dtype).removeprefix('torch.')}"


class Loss(nn.Module):
    """A loss over logits and targets drawn from the first input's last dimension."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if self.kind == "cross_entropy":
            return nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
        return nn.functional.mse_loss(logits, target)


def _transformers():
    import_torchvision()  # transformers imports it whenever it is installed
    import transformers
    return transformers


def _vision(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
    return lambda: getattr(import_torchvision().models, name)(**kwargs)


def _vit() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer
    import_torchvision()
    return VisionTransformer(image_size=224, patch_size=16, num_layers=2, num_heads=12,
                             hidden_dim=768, mlp_dim=3072, num_classes=1000)


def _gpt2() -> nn.Module:
    t = _transformers()
    return Logits(t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=768, n_head=12,
                                                 vocab_size=50257, n_positions=1024)))


def _llama() -> nn.Module:
    t = _transformers()  # RMSNorm, rotary embeddings, SwiGLU, grouped-query attention
    return Logits(t.LlamaForCausalLM(t.LlamaConfig(
        num_hidden_layers=2, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)))


def _bert() -> nn.Module:
    t = _transformers()
    return Logits(t.BertForMaskedLM(t.BertConfig(num_hidden_layers=2, hidden_size=768,
                                                 num_attention_heads=12, vocab_size=30522)))


def _t5() -> nn.Module:
    t = _transformers()

    class T5Encoder(nn.Module):  # relative position buckets, T5's RMS layer norm, ReLU MLP
        def __init__(self) -> None:
            super().__init__()
            self.encoder = t.T5EncoderModel(t.T5Config(num_layers=2, d_model=512, d_kv=64,
                                                       d_ff=2048, num_heads=8, vocab_size=32128))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.encoder(input_ids=tokens).last_hidden_state
    return T5Encoder()


class TopP(nn.Module):
    """Nucleus-sampling masks: softmax, a cumulative sum along the vocabulary, a threshold."""

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        probabilities = logits.softmax(-1)
        return (probabilities.cumsum(-1) < 0.9) * probabilities


class Scans(nn.Module):
    """Running sums, products and maxima along long rows, and a log-cumsum-exp."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.cumsum(-1) + torch.logcumsumexp(x, -1) + x.cummax(-1).values


IMAGES = (((32, 3, 224, 224), F32),)
VISION = [("resnet18", _vision("resnet18")), ("mobilenet_v3_small", _vision("mobilenet_v3_small")),
          ("efficientnet_b0", _vision("efficientnet_b0")), ("convnext_tiny", _vision("convnext_tiny")),
          ("vit_2layer", _vit)]
TEXT = [("gpt2_2layer", _gpt2, 50257, (8, 1024)), ("llama_2layer", _llama, 32000, (4, 1024)),
        ("bert_2layer", _bert, 30522, (16, 512)), ("t5_encoder_2layer", _t5, 32128, (16, 512))]


def workloads() -> list[Workload]:
    out: list[Workload] = []
    for name, make in VISION:
        images = IMAGES
        out += [Workload(name, make, images, "forward"), Workload(name, make, images, "train")]
    for name, make, vocabulary, shape in TEXT:
        tokens = ((shape, vocabulary),)
        out += [Workload(name, make, tokens, "forward"), Workload(name, make, tokens, "train")]
    out += [Workload("gpt2_2layer", _gpt2, ((TEXT[0][3], 50257),), "forward", BF16),
            Workload("llama_2layer", _llama, ((TEXT[1][3], 32000),), "train", BF16),
            Workload("resnet18", VISION[0][1], IMAGES, "forward", BF16)]
    for rows, classes in ((8192, 32000), (4096, 50257), (65536, 1000)):
        out.append(Workload(f"cross_entropy_{rows}x{classes}", lambda: Loss("cross_entropy"),
                            (((rows, classes), F32), ((rows,), classes)), "train"))
    out += [Workload("top_p_8x32000", TopP, (((8, 32000), F32),)),
            Workload("top_p_256x50257", TopP, (((256, 50257), F32),), "forward", BF16),
            Workload("scans_64x100000", Scans, (((64, 100000), F32),)),
            Workload("scans_4096x1024", Scans, (((4096, 1024), F32),), "train")]
    out.append(Workload("mse_4096x4096", lambda: Loss("mse"),
                        (((4096, 4096), F32), ((4096, 4096), F32)), "train"))
    for optimizer in ("Adam", "AdamW", "SGD"):
        out += [Workload("gpt2_2layer", _gpt2, (), optimizer),
                Workload("resnet18", VISION[0][1], (), optimizer)]
    return out


def _optimizer(name: str, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    options = {"SGD": {"lr": 0.1, "momentum": 0.9}, "Adam": {"lr": 1e-3},
               "AdamW": {"lr": 1e-3, "weight_decay": 0.01}}[name]
    return getattr(torch.optim, name)(parameters, foreach=False, **options)


def _fake(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """`model` with fake gxu parameters and buffers (the active FakeTensorMode's), its
    floating-point ones in `dtype`. Tied weights stay tied."""
    made: dict[int, torch.Tensor] = {}  # id of the real tensor -> its fake

    def fake(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in made:
            kind = dtype if tensor.is_floating_point() else tensor.dtype
            empty = torch.empty(tensor.shape, dtype=kind, device="gxu")
            made[id(tensor)] = nn.Parameter(empty, tensor.requires_grad) \
                if isinstance(tensor, nn.Parameter) else empty
        return made[id(tensor)]
    for module in model.modules():
        for tensors in (module._parameters, module._buffers):
            for name, tensor in tensors.items():
                if tensor is not None:
                    tensors[name] = fake(tensor)
    return model


def _launches(workload: Workload) -> list[launcher.CapturedLaunch]:
    """Every GXU kernel launch of one compiled step of the workload, on fake tensors."""
    torch._dynamo.reset()
    with torch.device("cpu"):  # real initialisation (some reads values, which fakes lack)
        model = workload.make()
    with FakeTensorMode(allow_non_fake_inputs=False), torch.device("gxu"), \
            warnings.catch_warnings(), launcher.predict_only(), kernels_loaded_in_this_process(), \
            launcher.capture() as captured:
        warnings.simplefilter("ignore")
        model = _fake(model, workload.dtype)
        if workload.mode in ("forward", "train"):
            inputs = [torch.empty(shape, dtype=workload.dtype) if isinstance(kind, torch.dtype)
                      else torch.empty(shape, dtype=torch.int64) for shape, kind in workload.inputs]
            if workload.mode == "train" and not any(True for _ in model.parameters()):
                for tensor in inputs:  # a loss: its gradient is the logits'
                    tensor.requires_grad_(tensor.is_floating_point())
            with torch.set_grad_enabled(workload.mode == "train"):
                output = torch.compile(model, dynamic=False)(*inputs)
                if workload.mode == "train":
                    output.float().square().mean().backward()
        else:
            parameters = [p for p in model.parameters() if p.requires_grad]
            for parameter in parameters:
                parameter.grad = torch.empty_like(parameter)
            optimizer = _optimizer(workload.mode, parameters)
            torch.compile(optimizer.step, dynamic=False)()
    torch._dynamo.reset()
    return captured


def _entries(workload: Workload) -> Iterator[dict]:
    for launch in _launches(workload):
        entry = corpus.entry(launch.kernel, launch.args)
        entry["workloads"] = [workload.label]
        yield entry


def thin_sizes(entries: list[dict], keep: int = MAX_SIZES) -> list[dict]:
    """At most `keep` size signatures of each structure: the smallest, the largest and those
    between them evenly (by total elements)."""
    by_structure: dict[str, list[dict]] = collections.defaultdict(list)
    for entry in entries:
        by_structure[entry["structure"]].append(entry)
    kept = []
    for group in by_structure.values():
        group.sort(key=lambda e: (corpus.elements(e), e["id"]))
        if len(group) > keep:
            step = (len(group) - 1) / (keep - 1)
            group = [group[round(i * step)] for i in range(keep)]
        kept += group
    return sorted(kept, key=lambda e: e["id"])


def build(chosen: list[Workload], previous: Optional[dict[str, dict]] = None) -> list[dict]:
    """The corpus entries of `chosen`, merged into `previous` (id -> entry), thinned. A
    kernel compiled again replaces its entry (its module and traits as code generation
    writes them today), keeping every workload that produced it."""
    entries = dict(previous or {})
    failures = []
    for workload in tqdm(chosen, desc="workloads", unit="workload", file=sys.stdout):
        start = time.perf_counter()
        try:
            found = list(_entries(workload))
        except Exception as error:  # one workload that cannot compile leaves the rest
            failures.append(f"{workload.label}: {type(error).__name__}: {str(error)[:200]}")
            continue
        for entry in found:
            seen = entries.get(entry["id"], {}).get("workloads", [])
            labels = seen + entry["workloads"] + [workload.label]
            entries[entry["id"]] = {**entry, "workloads": list(dict.fromkeys(labels))}
        tqdm.write(f"{workload.label}: {len(found)} launches, {len({e['id'] for e in found})} "
                   f"distinct, {time.perf_counter() - start:.0f} s")
    for failure in failures:
        print("FAILED", failure)
    return thin_sizes(list(entries.values()))


def _traits_literal(module: str) -> ast.AST:
    """The `gxu_traits` dict literal in a kernel module's `inductor_meta`."""
    for node in ast.walk(ast.parse(module)):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "gxu_traits":
                    return value
    raise ValueError("no gxu_traits in its module")


def refresh_counts(entry: dict) -> dict:
    """The entry with the counts its traits take from the kernel's code (arithmetic, math
    calls, live values, random numbers) counted again from the code it keeps, as code
    generation counts them today: a count added to the traits reaches the stored kernels
    without rebuilding the corpus (which would regenerate, and could rename, its kernels).
    The kernel's code, and so its id and part, stay as they are."""
    module = entry["module"]
    try:
        literal = _traits_literal(module)
    except ValueError as error:
        raise ValueError(f"corpus entry {entry['id']}: {error}") from None
    lines = module.splitlines(keepends=True)

    def offset(line: int, column: int) -> int:  # ast's columns count UTF-8 bytes
        return sum(map(len, lines[:line - 1])) + len(lines[line - 1].encode()[:column].decode())
    start = offset(literal.lineno, literal.col_offset)
    end = offset(literal.end_lineno, literal.end_col_offset)
    traits = ast.literal_eval(literal)
    work = kernel_work(module)
    traits.update(flops=work.flops, transcendentals=work.transcendentals,
                  live_values=live_values(module), random_numbers=work.random_numbers)
    return {**entry, "module": module[:start] + repr(traits) + module[end:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "kernels.jsonl"))
    parser.add_argument("--only", nargs="*", help="substrings of workload labels to compile "
                        "(their kernels are merged into --out's)")
    parser.add_argument("--refresh-counts", action="store_true",
                        help="recount the traits' code counts of --out's kernels in place")
    args = parser.parse_args()
    if args.refresh_counts:
        entries = [refresh_counts(e) for e in corpus.load(args.out)]
        corpus.save(entries, args.out)
        print(f"{len(entries)} kernels' counts refreshed in {args.out}")
        return
    gxusim.use_heuristics("gxu")
    chosen = [w for w in workloads() if not args.only or any(s in w.label for s in args.only)]
    previous = {e["id"]: e for e in corpus.load(args.out)} if args.only and Path(args.out).exists() \
        else None
    entries = build(chosen, previous)
    corpus.save(entries, args.out)
    print(corpus.summary(entries))


if __name__ == "__main__":
    main()
