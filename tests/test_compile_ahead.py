"""Compiling ahead: a compiled graph's emulator modules compile in worker processes.

Each test runs a fresh interpreter on the emulator target (the session may hold the cuda
target), with its own emulator cache, so numba really compiles.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _python(code: str, cache: Path, workers: int) -> dict:
    """Run `code` on the emulator; it prints one JSON line last, returned."""
    env = {**{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"},
           "GXUSIM_TARGET": "emulator", "GXUSIM_CACHE_DIR": str(cache),
           "GXUSIM_COMPILE_WORKERS": str(workers)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


RUN_SIX_KERNELS = """
    import json, torch, gxusim
    from gxusim.emulator import compile_pool

    def f(x, y):
        a = torch.relu(x) * y + 1
        return a.sum(1), (a * a).softmax(0), torch.tanh(y).cumsum(0)

    x, y = torch.randn(300, 70), torch.randn(300, 70)
    got = torch.compile(f)(x.to("gxu"), y.to("gxu"))
    for g, e in zip(got, f(x, y)):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-4, atol=1e-4)
"""
SIX_KERNELS = RUN_SIX_KERNELS + """
    launches = sum(1 for r in gxusim.launches() if r.policy != "extern")
    print(json.dumps({**compile_pool.counts, "launches": launches}))
"""


def test_a_graphs_kernels_compile_in_a_worker_and_a_warm_process_compiles_nothing(tmp_path):
    cold = _python(SIX_KERNELS, tmp_path, workers=1)
    modules = len(list((tmp_path / "emulator").glob("k_*.py")))
    assert cold["launches"] >= modules >= 3
    # each module compiled once: by the worker (waited for) or taken back by this process
    assert cold["ahead"] + cold["here"] == modules and cold["ahead"] >= 1, cold
    warm = _python(SIX_KERNELS, tmp_path, workers=1)
    assert warm["ahead"] == warm["here"] == 0, warm  # numba's disk cache has every launch


def test_collecting_leaves_random_numbers_and_mutated_inputs_as_they_were(tmp_path):
    """The collecting run draws no seed the real call would not (dropout gives the same mask
    with workers on as with them off), and a graph that mutates its input is not collected
    (run twice, it would add twice)."""
    code = """
        import json, torch, gxusim
        from gxusim.emulator import compile_pool

        drop = torch.compile(lambda t: torch.nn.functional.dropout(t, 0.4, training=True) * 3)
        torch.manual_seed(7)
        draw = drop(torch.ones(2000, device="gxu")).cpu()
        collected = compile_pool.counts["ahead"] + compile_pool.counts["here"]

        def bump(t):
            t.add_(1)
            return (t * 2).sum()
        z = torch.zeros(500, device="gxu")
        total = torch.compile(bump)(z)
        print(json.dumps({"draw": draw.tolist(), "collected": collected,
                          "z": z.cpu().tolist(), "total": total.item()}))
    """
    ahead = _python(code, tmp_path, workers=1)  # a cold cache: dropout's kernel compiles ahead
    assert ahead["collected"] >= 1, ahead
    assert ahead["z"] == [1.0] * 500 and ahead["total"] == 1000.0, ahead
    plain = _python(code, tmp_path, workers=0)
    assert plain["collected"] == 0
    assert ahead["draw"] == plain["draw"]
    assert 0.5 < sum(v != 0 for v in plain["draw"]) / 2000 < 0.7


def test_the_collecting_call_never_writes_into_the_real_calls_inputs(tmp_path):
    """A graph may write into its inputs without mutating them in the graph's terms: a
    backward graph reuses the memory of the saved activations donated to it (a Llama
    training step's gradients were garbage with compile workers on). The collecting call
    runs on copies: the real call reads the inputs as the caller gave them, with their
    strides, offsets and shared storage."""
    code = """
        import json, torch
        from gxusim.compiler.graph_runtime import compiling_ahead
        seen = []

        def call(args):
            row, column = args
            args.clear()
            seen.append([row.tolist(), column.tolist(),
                         row.untyped_storage().data_ptr() == column.untyped_storage().data_ptr()])
            row.fill_(-1.0)  # as Inductor's wrapper writes a buffer into donated memory
            return None
        base = torch.arange(12.0, device="gxu").view(3, 4)
        compiling_ahead(call, None)([base[1], base[:, 2]])
        print(json.dumps({"seen": seen, "base": base.cpu().tolist()}))
    """
    result = _python(code, tmp_path, workers=1)
    collected, real = result["seen"]
    assert collected == real == [[4.0, 5.0, 6.0, 7.0], [2.0, 6.0, 10.0], True], result
    assert result["base"][1] == [-1.0] * 4  # the real call's own write stays


def test_a_worker_that_dies_is_replaced_and_its_launch_still_runs(tmp_path):
    """A killed worker costs the launch it held a compile here, not the pool: the next
    graph's modules are compiled by a new worker."""
    code = RUN_SIX_KERNELS + """
    first = dict(compile_pool.counts)
    for process in compile_pool.processes:
        process.kill()
        process.wait()

    def g(x):
        return torch.sigmoid(x).amax(0), (x * 3).exp().mean(1)

    got = torch.compile(g)(x.to("gxu"))
    for a, e in zip(got, g(x)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
    print(json.dumps({"first": first, "now": compile_pool.counts,
                      "workers": len(compile_pool.processes)}))
"""
    counts = _python(code, tmp_path, workers=1)
    assert counts["first"]["ahead"] >= 1, counts
    assert counts["workers"] == 2, counts  # the killed one and its replacement
    assert counts["now"]["ahead"] > counts["first"]["ahead"], counts


def test_a_worker_compiles_without_importing_torch(tmp_path):
    """Workers start in well under a second: they import numba and the emulator's runtime,
    not the gxusim package's torch, Dynamo and Inductor. Here a worker that cannot import
    torch at all compiles a module that uses the runtime, and numba caches its code."""
    import pickle
    from numba import types
    from gxusim.emulator import compile_pool
    module = tmp_path / "k_0123.py"
    module.write_text("from numba import njit\n"
                      "from gxusim.emulator.runtime import *\n\n\n"
                      "@njit(cache=True)\n"
                      "def _program(x):\n"
                      "    return _tanh(x) + 1.0\n")
    no_torch = "import sys\nsys.modules['torch'] = None\n"  # `import torch` raises
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    worker = subprocess.run([sys.executable, "-c", no_torch + compile_pool._worker_code()],
                            input=pickle.dumps((str(module), (types.float64,))),
                            capture_output=True, timeout=300, env=env)
    assert worker.returncode == 0, worker.stderr.decode()[-2000:]
    assert pickle.loads(worker.stdout) is None, pickle.loads(worker.stdout)  # no error
    assert list((tmp_path / "numba").rglob("*_program*.nbi"))
