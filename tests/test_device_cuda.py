"""The gxu device on the cuda target: gxu memory is CUDA memory, ops match CPU, no leaks.

Every test is `cuda`-marked; tests/conftest.py skips them without a GPU or when the
session target is not cuda (run `python -m pytest tests -m cuda` on the GPU machine).
"""
from __future__ import annotations

import pytest
import torch

import gxusim
from gxusim.device import backing_alias, memory

pytestmark = pytest.mark.cuda


def test_target_is_cuda() -> None:
    assert gxusim.current_target() == "cuda"
    assert gxusim.target.backing_device().type == "cuda"


def test_gxu_memory_is_cuda_memory() -> None:
    torch.cuda.synchronize()
    cuda_before = torch.cuda.memory_allocated()
    x = torch.arange(1 << 20, dtype=torch.float32, device="gxu")
    assert torch.cuda.memory_allocated() - cuda_before >= x.numel() * 4
    alias = backing_alias(x)
    assert alias.device.type == "cuda" and alias.data_ptr() == x.data_ptr()
    alias[0] = -1.0  # writes through the alias land in the gxu tensor: same memory
    assert x[0].item() == -1.0
    del x, alias
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == cuda_before


def test_ops_match_cpu() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    ga, gb = a.to("gxu"), b.to("gxu")
    torch.testing.assert_close((ga @ gb).relu().sum(0).cpu(), (a @ b).relu().sum(0))
    torch.testing.assert_close(torch.softmax(ga, -1).cpu(), torch.softmax(a, -1))
    view = ga.t()[3:7]
    view.mul_(2)
    torch.testing.assert_close(ga.cpu(), torch.cat([a[:, :3], a[:, 3:7] * 2, a[:, 7:]], 1))
    out = torch.empty(0, device="gxu")
    torch.add(ga, 1, out=out)
    assert out.shape == ga.shape and torch.equal(out.cpu(), ga.cpu() + 1)


def test_training_step_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    gxu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    gxu.load_state_dict(cpu.state_dict())
    gxu.to("gxu")
    x = torch.randn(4, 8)
    for model, opt, inputs in ((cpu, torch.optim.SGD(cpu.parameters(), lr=0.1), x),
                               (gxu, torch.optim.SGD(gxu.parameters(), lr=0.1), x.to("gxu"))):
        opt.zero_grad()
        model(inputs).pow(2).sum().backward()
        opt.step()
    for p_cpu, p_gxu in zip(cpu.parameters(), gxu.parameters()):
        torch.testing.assert_close(p_gxu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)


def test_rng_reproducible_and_separate_from_cuda_stream() -> None:
    torch.gxu.manual_seed(3)
    first = torch.randn(16, device="gxu").cpu()
    torch.cuda.manual_seed(11)
    expected_cuda = torch.rand(4, device="cuda")
    torch.gxu.manual_seed(3)
    torch.cuda.manual_seed(11)
    assert torch.equal(torch.randn(16, device="gxu").cpu(), first)
    assert torch.equal(torch.rand(4, device="cuda"), expected_cuda)


def test_no_leaks_over_many_cycles() -> None:
    for _ in range(100):
        (torch.empty(4096, device="gxu") * 2).sum()
    torch.cuda.synchronize()
    gxu_before, cuda_before = torch.gxu.memory_allocated(), torch.cuda.memory_allocated()
    live = memory.live_storages()
    for _ in range(5000):
        (torch.empty(4096, device="gxu") * 2).sum()
    torch.cuda.synchronize()
    assert torch.gxu.memory_allocated() == gxu_before
    assert memory.live_storages() == live
    assert torch.cuda.memory_allocated() == cuda_before


@pytest.mark.xfail(strict=True, raises=RuntimeError,
                   reason="pytorch/pytorch#161129: a registered PrivateUse1 backend is torch's "
                          "accelerator, and CUDA autograd nodes then find no stream (README)")
def test_cuda_backward_in_a_process_with_gxu() -> None:
    """The README's known limitation, kept honest: once torch fixes it, this fails, and the
    limitation goes."""
    x = torch.randn(4, 4, device="cuda", requires_grad=True)
    (x * 2).sum().backward()


def test_gxu_pinned_memory_is_cudas() -> None:
    """Pinned for gxu is pinned for CUDA: the same page-locked memory, copied without a wait."""
    pinned = torch.randn(1 << 10).pin_memory()
    assert pinned.is_pinned() and pinned[8:].is_pinned()
    x = pinned.to("gxu", non_blocking=True)
    torch.gxu.synchronize()
    assert x.tolist() == pinned.tolist()
