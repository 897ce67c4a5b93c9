"""The gxu device on the session's target: registration, factories, views, copies,
serialization, autograd, RNG and memory accounting, each checked against CPU."""
from __future__ import annotations

import gc
import importlib
import io
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import gxusim
from gxusim.device import memory, ops


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (registration and targets are per process)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


# --- registration -----------------------------------------------------------------------

def test_import_and_register_twice_are_harmless() -> None:
    importlib.reload(gxusim)  # runs the module body (and so registration) a second time
    gxusim.device.register()
    x = torch.ones(3, device="gxu")
    assert x.is_gxu and torch.equal((x + x).cpu(), torch.full((3,), 2.0))
    assert torch.gxu.device_count() == 1


def test_registration_after_user_renamed_to_gxu() -> None:
    result = _python("""
        import torch
        torch.utils.rename_privateuse1_backend("gxu")
        import gxusim
        print((torch.arange(4.0, device="gxu") * 2).sum().item())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "12.0"


def test_registration_after_rename_to_another_name_fails_naming_both() -> None:
    result = _python("""
        import torch
        torch.utils.rename_privateuse1_backend("foo")
        import gxusim
    """)
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert "'gxu'" in message and "'foo'" in message


# --- factories --------------------------------------------------------------------------

@pytest.mark.parametrize("make, expected", [
    (lambda d: torch.zeros(2, 3, device=d), torch.zeros(2, 3)),
    (lambda d: torch.ones(2, 3, device=d), torch.ones(2, 3)),
    (lambda d: torch.full((2, 3), 7.5, device=d), torch.full((2, 3), 7.5)),
    (lambda d: torch.arange(1, 10, 2, device=d), torch.arange(1, 10, 2)),
    (lambda d: torch.eye(4, device=d), torch.eye(4)),
], ids=["zeros", "ones", "full", "arange", "eye"])
def test_factories(make, expected) -> None:
    actual = make("gxu")
    assert actual.device.type == "gxu"
    assert torch.equal(actual.cpu(), expected)


def test_empty_and_empty_strided_have_requested_geometry() -> None:
    e = torch.empty(3, 4, device="gxu", dtype=torch.float64)
    assert (e.shape, e.dtype, e.device.type) == ((3, 4), torch.float64, "gxu")
    s = torch.empty_strided((3, 4), (1, 3), device="gxu")
    assert s.stride() == (1, 3) and s.device.type == "gxu"
    s.copy_(torch.arange(12.0).view(3, 4))
    assert torch.equal(s.cpu(), torch.arange(12.0).view(3, 4))


@pytest.mark.parametrize("factory", [torch.randn, torch.rand], ids=["randn", "rand"])
def test_random_factories(factory) -> None:
    x = factory(1000, device="gxu")
    assert x.device.type == "gxu" and x.shape == (1000,)
    assert x.cpu().unique().numel() > 990  # really random, not a constant fill
    if factory is torch.rand:
        assert 0 <= x.min().item() and x.max().item() < 1


# --- views, in-place, out= ---------------------------------------------------------------

def test_view_chain_writes_through_to_base() -> None:
    base = torch.zeros(4, 6, device="gxu")
    view = base.view(2, 12)[1].view(3, 4).t()[1:3]  # view of view of view ...
    view.fill_(5.0)
    expected = torch.zeros(4, 6)
    expected.view(2, 12)[1].view(3, 4).t()[1:3].fill_(5.0)
    assert torch.equal(base.cpu(), expected)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    base[0, 0] = 9.0
    assert base.view(-1)[0].item() == 9.0


def test_in_place_ops_and_metadata_changes() -> None:
    x = torch.arange(6.0, device="gxu").view(2, 3)
    x.mul_(2).add_(1)
    assert torch.equal(x.cpu(), torch.arange(6.0).view(2, 3) * 2 + 1)
    x.t_()
    assert x.shape == (3, 2) and torch.equal(x.cpu(), (torch.arange(6.0).view(2, 3) * 2 + 1).t())
    x.unsqueeze_(0)
    assert x.shape == (1, 3, 2)


def test_out_arguments_grow_shrink_and_keep_identity() -> None:
    a, b = torch.randn(5, device="gxu"), torch.randn(5, device="gxu")
    out = torch.empty(0, device="gxu")
    result = torch.add(a, b, out=out)
    assert result is out and out.shape == (5,)
    assert torch.equal(out.cpu(), a.cpu() + b.cpu())
    small = torch.empty(2, device="gxu")
    with pytest.warns(UserWarning, match="resized"):
        torch.mul(a, b, out=small)
    assert torch.equal(small.cpu(), a.cpu() * b.cpu())
    values = torch.empty(0, device="gxu")
    indices = torch.empty(0, dtype=torch.long, device="gxu")
    m = torch.randn(3, 4)
    torch.max(m.to("gxu"), 1, out=(values, indices))
    assert torch.equal(values.cpu(), m.max(1).values)
    assert torch.equal(indices.cpu(), m.max(1).indices)


# --- copies, printing, serialization -----------------------------------------------------

def test_to_and_copy_between_cpu_and_gxu() -> None:
    cpu = torch.randn(4, 5)
    gxu = cpu.to("gxu")
    assert gxu.is_gxu and torch.equal(gxu.cpu(), cpu)
    assert torch.equal(cpu.gxu().to("cpu"), cpu)
    target = torch.empty(4, 5, device="gxu")
    target.copy_(cpu)
    assert torch.equal(target.cpu(), cpu)
    back = torch.empty(4, 5)
    back.copy_(target.t().t())
    assert torch.equal(back, cpu)
    assert torch.equal(gxu.to(torch.float64).cpu(), cpu.double())


def test_printing() -> None:
    text = repr(torch.tensor([1.5, -2.0], device="gxu"))
    assert text == "tensor([ 1.5000, -2.0000], device='gxu:0')"


def test_save_and_load() -> None:
    saved = {"w": torch.randn(3, 3, device="gxu"), "step": 4}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["w"].device.type == "gxu" and loaded["step"] == 4
    assert torch.equal(loaded["w"].cpu(), saved["w"].cpu())
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], saved["w"].cpu())
    buffer = io.BytesIO()
    torch.save(on_cpu, buffer)
    buffer.seek(0)
    assert torch.load(buffer, map_location="gxu")["w"].device.type == "gxu"


# --- autograd and training ---------------------------------------------------------------

def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def test_autograd_through_mlp_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu = _mlp()
    x = torch.randn(5, 8)
    gxu_params = [p.detach().to("gxu").requires_grad_() for p in cpu.parameters()]
    w1, b1, w2, b2 = gxu_params
    xg = x.to("gxu")
    out = torch.relu(xg @ w1.t() + b1) @ w2.t() + b2
    out.pow(2).mean().backward()
    cpu(x).pow(2).mean().backward()
    for p_cpu, p_gxu in zip(cpu.parameters(), gxu_params):
        assert p_gxu.grad.device.type == "gxu"
        torch.testing.assert_close(p_gxu.grad.cpu(), p_cpu.grad)


def test_module_to_gxu_and_optimizer_steps_match_cpu() -> None:
    torch.manual_seed(0)
    cpu = _mlp()
    gxu = _mlp()
    gxu.load_state_dict(cpu.state_dict())
    gxu.to("gxu")
    assert all(p.device.type == "gxu" for p in gxu.parameters())
    opt_cpu = torch.optim.Adam(cpu.parameters(), lr=0.01)
    opt_gxu = torch.optim.Adam(gxu.parameters(), lr=0.01)
    x, y = torch.randn(6, 8), torch.randn(6, 3)
    for _ in range(3):
        for model, opt, inputs, targets in ((cpu, opt_cpu, x, y),
                                            (gxu, opt_gxu, x.to("gxu"), y.to("gxu"))):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(inputs), targets).backward()
            opt.step()
    for p_cpu, p_gxu in zip(cpu.parameters(), gxu.parameters()):
        torch.testing.assert_close(p_gxu.detach().cpu(), p_cpu.detach())


def test_conv2d_forward_and_backward_match_cpu() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(3, 4, 3)
    gxu = torch.nn.Conv2d(3, 4, 3)
    gxu.load_state_dict(cpu.state_dict())
    gxu.to("gxu")
    x = torch.randn(2, 3, 8, 8)
    cpu(x).sum().backward()
    gxu(x.to("gxu")).sum().backward()
    torch.testing.assert_close(gxu.weight.grad.cpu(), cpu.weight.grad)


# --- RNG ---------------------------------------------------------------------------------

def test_manual_seed_makes_gxu_random_ops_reproducible() -> None:
    def draws() -> list[torch.Tensor]:
        x = torch.ones(64, device="gxu")
        return [torch.randn(8, device="gxu"), torch.rand(8, device="gxu"),
                torch.nn.functional.dropout(x, 0.5), torch.randperm(10, device="gxu"),
                torch.randint(0, 100, (8,), device="gxu")]

    torch.gxu.manual_seed(1234)
    first = [t.cpu() for t in draws()]
    torch.gxu.manual_seed(1234)
    second = [t.cpu() for t in draws()]
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    torch.gxu.manual_seed(4321)
    assert not torch.equal(torch.randn(8, device="gxu").cpu(), first[0])


def test_gxu_stream_is_separate_from_the_backing_devices() -> None:
    torch.manual_seed(7)
    expected = torch.rand(5)
    torch.manual_seed(7)
    torch.randn(100, device="gxu")  # must not advance the CPU generator
    assert torch.equal(torch.rand(5), expected)


def test_rng_state_round_trip() -> None:
    state = torch.gxu.get_rng_state()
    first = torch.randn(4, device="gxu").cpu()
    torch.gxu.set_rng_state(state)
    assert torch.equal(torch.randn(4, device="gxu").cpu(), first)


# --- memory ------------------------------------------------------------------------------

@pytest.mark.parametrize("first", ["torch.ones(3).to('gxu')", "torch.empty(3, device='gxu')",
                                   "torch.randn(3, device='gxu')"])
def test_the_first_gxu_allocation_fixes_the_target(first) -> None:
    done = _python(f"""
        import torch, gxusim
        from gxusim import target
        assert target._frozen_device is None
        x = {first}
        assert target._frozen_device == target.backing_device(), target._frozen_device
    """)
    assert done.returncode == 0, done.stderr[-2000:]


def test_memory_allocated_grows_by_the_allocation() -> None:
    before = torch.gxu.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="gxu")
    assert torch.gxu.memory_allocated() - before == 4000
    assert torch.gxu.max_memory_allocated() >= torch.gxu.memory_allocated()
    view = x[10:20]
    del x
    assert torch.gxu.memory_allocated() - before == 4000  # a view keeps its storage alive
    del view
    assert torch.gxu.memory_allocated() == before


def test_a_backing_alias_keeps_its_gxu_memory_alive_and_comes_back_as_a_view() -> None:
    before = torch.gxu.memory_allocated()
    x = torch.arange(1000, dtype=torch.float32, device="gxu")
    alias = memory.backing_alias(x)
    assert alias.device == gxusim.target.backing_device() and alias.data_ptr() == x.data_ptr()
    del x
    gc.collect()
    assert torch.gxu.memory_allocated() - before == 4000  # the alias holds the gxu storage
    back = memory.from_backing(alias[10:])  # a view of the same gxu storage, not a new one
    assert back.device.type == "gxu" and torch.equal(back.cpu(), torch.arange(10, 1000.0))
    assert torch.gxu.memory_allocated() - before == 4000
    del alias, back
    gc.collect()
    assert torch.gxu.memory_allocated() == before


def test_allocations_and_view_primitives_skip_the_python_fallback(monkeypatch) -> None:
    calls = []
    run = ops._fallback
    monkeypatch.setattr(ops, "_fallback", lambda op, args, kwargs: calls.append(op) or run(
        op, args, kwargs))
    x = torch.empty(4, 6, device="gxu")
    y = torch.empty_strided((4, 6), (1, 4), device="gxu")
    views = (x.view(6, 4), x.t(), x[1:, ::2], x.as_strided((2, 2), (1, 2), 3), y.reshape(24 // 6, 6))
    assert calls == [], f"went through the Python fallback: {calls}"
    assert all(v.device.type == "gxu" for v in views) and y.stride() == (1, 4)
    (x + 1).sum()
    assert calls, "the check above would not see a fallback call"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_allocate_free_cycles_do_not_leak() -> None:
    for _ in range(200):  # warm up allocator caches and op plans
        (torch.empty(256, device="gxu") + 1).sum()
    allocated, live, rss = torch.gxu.memory_allocated(), memory.live_storages(), _rss_bytes()
    for _ in range(10_000):
        (torch.empty(256, device="gxu") + 1).sum()
    assert torch.gxu.memory_allocated() == allocated
    assert memory.live_storages() == live
    # 10,000 cycles x 3 allocations x 1 KiB would leak ~30 MiB; allow allocator noise.
    assert _rss_bytes() - rss < 4 * 2**20


def test_storages_are_16_byte_aligned() -> None:
    for numel in (1, 3, 17, 1000):
        for dtype in (torch.uint8, torch.float32, torch.float64):
            assert torch.empty(numel, dtype=dtype, device="gxu").data_ptr() % 16 == 0


# --- target ------------------------------------------------------------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_target_without_gpu_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="target 'cuda' needs a CUDA GPU"):
        gxusim.set_target("cuda")


def test_unknown_target_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown gxusim target 'tpu'.*emulator"):
        gxusim.set_target("tpu")


def test_streams_and_events_have_torch_cuda_semantics() -> None:
    stream = torch.gxu.Stream()
    with torch.gxu.stream(stream):
        start, end = torch.gxu.Event(enable_timing=True), torch.gxu.Event(enable_timing=True)
        start.record()
        y = torch.randn(256, 256, device="gxu") @ torch.randn(256, 256, device="gxu")
        end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    stream.synchronize()
    torch.gxu.current_stream().wait_stream(stream)
    assert y.shape == (256, 256)
    untimed, other = torch.gxu.Event(), torch.gxu.Event()
    untimed.record()
    other.record()
    other.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):  # torch.Event's own check
        untimed.elapsed_time(other)


def test_memory_queries() -> None:
    x = torch.empty(1 << 20, device="gxu")
    free, total = torch.gxu.mem_get_info()
    assert 0 < free <= total
    assert torch.gxu.memory_reserved() >= torch.gxu.memory_allocated() >= x.nbytes
    torch.gxu.empty_cache()  # callable on every target
    assert x.device.type == "gxu"


def test_autocast_casts_like_cuda_and_trains() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4)).to("gxu")
    x = torch.randn(8, 16, device="gxu")
    assert torch.bfloat16 in torch.gxu.get_amp_supported_dtype()
    with torch.autocast("gxu", dtype=torch.bfloat16):
        hidden = model[0](x)
        normed = model[1](hidden)
        out = model[2](normed)
        probabilities = out.softmax(-1)
    assert (hidden.dtype, normed.dtype, out.dtype, probabilities.dtype) == \
        (torch.bfloat16, torch.float32, torch.bfloat16, torch.float32)
    probabilities.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = model[0].cpu()(x.cpu())
    torch.testing.assert_close(hidden.cpu(), reference, rtol=2e-2, atol=2e-2)
