"""A compiled gxu graph runs on the backing device (`gxusim.compiler.graph_runtime`): its
inputs enter as aliases, its buffers and extern calls live on the backing device, and its
outputs come back as gxu tensors that own their memory, on both targets."""
import gc

import torch

import gxusim
from gxusim.compiler.inductor_registration import last_generated_code
from gxusim.device import memory, ops
from gxusim.models import CASES


def _count_eager_dispatch(monkeypatch) -> list:
    calls = []
    real = ops._fallback

    def counted(op, args, kwargs):
        calls.append(op)
        return real(op, args, kwargs)
    monkeypatch.setattr(ops, "_fallback", counted)
    return calls


def test_a_warm_compiled_call_never_goes_through_gxu_eager_dispatch(monkeypatch):
    """mlp: two extern matmuls and a GXU kernel, all on backing memory; equal to eager."""
    torch._dynamo.reset()
    model, inputs = CASES["mlp"].build("gxu")
    compiled = torch.compile(model)
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):  # see the code
        compiled(*inputs)
        gxusim.clear_launches()
        calls = _count_eager_dispatch(monkeypatch)
        got = compiled(*inputs)
    assert calls == []
    assert "gxu_graph.enter(" in last_generated_code()
    kinds = {r.policy == "extern" for r in gxusim.launches()}
    assert kinds == {True, False}  # extern calls and GXU kernels both recorded
    assert got.device.type == "gxu"
    reference = model.cpu()(*[t.cpu() for t in inputs])
    torch.testing.assert_close(got.cpu(), reference, rtol=1e-4, atol=1e-5)


def test_outputs_own_their_memory_and_temporaries_are_not_gxu_allocations():
    x = torch.randn(4096, device="gxu")
    compiled = torch.compile(lambda t: ((t * 2).sin() @ t.unsqueeze(1)).relu())
    compiled(x)
    gc.collect()  # earlier tests' tensors are not freed in the middle of this one
    before, live = torch.gxu.memory_allocated(), memory.live_storages()
    out = compiled(x)
    assert out.device.type == "gxu" and out.shape == (1,)
    assert torch.gxu.memory_allocated() - before == out.untyped_storage().nbytes()
    del out
    gc.collect()
    assert torch.gxu.memory_allocated() == before and memory.live_storages() == live


def test_a_graph_without_inputs_and_a_graph_with_a_cpu_output():
    made = torch.compile(lambda: torch.arange(8, device="gxu") * 3)()
    assert made.device.type == "gxu" and made.cpu().tolist() == [3 * i for i in range(8)]
    x, y = torch.randn(16, device="gxu"), torch.randn(16)
    on_gxu, on_cpu = torch.compile(lambda a, b: (a + 1, b * 2))(x, y)
    assert on_gxu.device.type == "gxu" and on_cpu.device.type == "cpu"
    torch.testing.assert_close(on_gxu.cpu(), x.cpu() + 1)
    torch.testing.assert_close(on_cpu, y * 2)


def test_training_step_gradients_are_gxu_and_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    model(x).square().mean().backward()
    expected = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model.to("gxu")
    torch.compile(model)(x.to("gxu")).square().mean().backward()
    for parameter, want in zip(model.parameters(), expected):
        assert parameter.grad.device.type == "gxu"
        torch.testing.assert_close(parameter.grad.cpu(), want, rtol=1e-4, atol=1e-5)


def test_convolution_results_take_the_layout_inductor_traced_with():
    # Inductor plans gxu convolutions from torch's fake gxu layouts (channels-last inputs,
    # contiguous results here); the backing kernel (oneDNN, cuDNN) picks its own output
    # layout, which the wrapper must not see: it asserts on, and indexes by, the traced one.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 16, 3, padding=1))
    x = torch.randn(2, 3, 16, 16)
    expected = model(x)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model.to("gxu"))(x.to("gxu"))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_warm_launches_share_their_counted_facts():
    # A long run keeps up to GXUSIM_LAUNCH_HISTORY records: a warm launch that counted the
    # same facts as the one before refers to that launch's facts instead of a copy (on the
    # emulator target they are counted again on every run; elsewhere they come from the plan).
    x = torch.randn(4096, device="gxu")
    compiled = torch.compile(lambda t: (t * 3).relu())
    compiled(x)
    gxusim.clear_launches()
    compiled(x)
    compiled(x)
    first, second = gxusim.launches()
    assert first.facts is not None and second.facts is first.facts


def test_a_graph_buffer_is_backing_memory_whatever_sequence_type_gives_its_geometry():
    from gxusim.compiler.graph_runtime import empty_strided
    for size, stride in (((4, 3), (3, 1)), (torch.Size([4, 3]), (1, 4)), ([4, 3], [3, 1])):
        buffer = empty_strided(size, stride, device="gxu", dtype=torch.float16)
        assert buffer.device == gxusim.target.backing_device()
        assert (tuple(buffer.size()), buffer.stride(), buffer.dtype) == (
            (4, 3), tuple(stride), torch.float16)
