"""`torch.compile(mode="reduce-overhead")` on gxu (`gxusim.compiler.graph_replay`): a graph is
captured once per size signature and replayed, inputs that move are copied into the graph's
buffers, launch records still say what ran, and graphs that cannot be captured say why.

On any target, the capture is stood in for by a graph that calls the wrapper again (the
bookkeeping is what is tested); the `cuda` test captures real CUDA graphs."""
import logging

import pytest
import torch

import gxusim
from gxusim.compiler import graph_replay
from gxusim.launch import launches


class CallAgain:
    """A captured graph that, at each replay, runs the call it captured again (writing its
    results into the captured outputs), its launches left out of the records as a real
    replay's are."""
    captures = 0

    def capture(self, call):
        CallAgain.captures += 1
        self.call, self.outputs = call, call()
        return self.outputs

    def replay(self):
        with graph_replay.launch_records.collecting():
            for kept, new in zip(self.outputs, self.call()):
                kept.copy_(new)


def _fn(x, w):
    return (x @ w).relu() + 1


def _calls(compiled, calls):
    """Each call's result (cloned: the next call overwrites it) and launch records."""
    results = []
    for x, w in calls:
        gxusim.clear_launches()
        results.append((compiled(x, w).cpu().clone(), [r.kernel for r in launches()]))
    return results


def _check_replays(compiled, graphs_captured):
    torch.manual_seed(0)
    w, moved_w = (torch.randn(16, 16, device="gxu") for _ in range(2))
    xs = [torch.randn(8, 16, device="gxu") for _ in range(6)]
    calls = [(xs[0], w), (xs[1], w), (xs[2], w),  # warm-up, capture, replay
             (xs[3], moved_w), (xs[4], moved_w),  # w moved: captured again, w copied from now
             (xs[5], w)]
    results = _calls(compiled, calls)
    for (got, _), (x, weights) in zip(results, calls):
        torch.testing.assert_close(got, _fn(x.cpu(), weights.cpu()))
    assert graphs_captured() == 2
    kernels = [names for _, names in results]
    assert all(names == kernels[0] for names in kernels) and kernels[0]  # each call's launches


def test_a_graph_is_captured_once_and_replayed_with_moved_inputs_copied(monkeypatch):
    monkeypatch.setattr(graph_replay, "refusal", lambda inputs: None)
    monkeypatch.setattr(graph_replay, "CUDAGraph", CallAgain)
    monkeypatch.setattr(CallAgain, "captures", 0)
    torch._dynamo.reset()
    with torch.no_grad():
        _check_replays(torch.compile(_fn, mode="reduce-overhead"), lambda: CallAgain.captures)


def test_graphs_that_cannot_be_captured_run_kernel_by_kernel_and_say_why(monkeypatch, caplog):
    monkeypatch.setattr(graph_replay, "CUDAGraph", CallAgain)
    monkeypatch.setattr(CallAgain, "captures", 0)
    torch._dynamo.reset()
    x = torch.randn(8, 16, device="gxu", requires_grad=True)
    w = torch.randn(16, 16, device="gxu")
    compiled = torch.compile(_fn, mode="reduce-overhead")
    with caplog.at_level(logging.WARNING, logger=graph_replay.__name__):
        for _ in range(3):
            compiled(x, w).sum().backward()
    assert "a training graph" in caplog.text
    reference = x.detach().cpu().requires_grad_()
    _fn(reference, w.cpu()).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 3 * reference.grad)
    assert CallAgain.captures == 0


@pytest.mark.cuda
def test_reduce_overhead_replays_cuda_graphs_of_gxu_kernels(monkeypatch):
    captures = []

    class Counted(graph_replay.CUDAGraph):
        def capture(self, call):
            captures.append(self)
            return super().capture(call)
    monkeypatch.setattr(graph_replay, "CUDAGraph", Counted)
    torch._dynamo.reset()
    with torch.no_grad():
        _check_replays(torch.compile(_fn, mode="reduce-overhead"), lambda: len(captures))


class FailsToCapture(CallAgain):
    def capture(self, call):
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_graph_whose_capture_fails_runs_kernel_by_kernel_and_says_why(monkeypatch, caplog):
    monkeypatch.setattr(graph_replay, "refusal", lambda inputs: None)
    monkeypatch.setattr(graph_replay, "CUDAGraph", FailsToCapture)
    torch._dynamo.reset()
    x, w = torch.randn(8, 16, device="gxu"), torch.randn(16, 16, device="gxu")
    compiled = torch.compile(_fn, mode="reduce-overhead")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger=graph_replay.__name__):
        results = [compiled(x, w).cpu() for _ in range(3)]
    assert "capturing it failed: operation not permitted" in caplog.text
    for got in results:
        torch.testing.assert_close(got, _fn(x.cpu(), w.cpu()))


def test_a_graph_that_mutates_an_input_is_not_captured(monkeypatch, caplog):
    monkeypatch.setattr(graph_replay, "refusal", lambda inputs: None)
    monkeypatch.setattr(graph_replay, "CUDAGraph", CallAgain)
    monkeypatch.setattr(CallAgain, "captures", 0)

    def accumulate(total, x):
        total.add_(x)
        return total * 2
    torch._dynamo.reset()
    total, x = torch.zeros(64, device="gxu"), torch.ones(64, device="gxu")
    compiled = torch.compile(accumulate, mode="reduce-overhead")
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger=graph_replay.__name__):
        results = [compiled(total, x).cpu() for _ in range(3)]
    assert "mutates its inputs" in caplog.text and CallAgain.captures == 0
    assert [r[0].item() for r in results] == [2.0, 4.0, 6.0] and total.cpu()[0].item() == 3.0
