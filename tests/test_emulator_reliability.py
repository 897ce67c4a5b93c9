"""The emulator on correct programs it used to refuse or get wrong (issue #40): partial
writes by design are not uncovered, `while` loops and the libdevice calls Inductor emits
run and match eager, a kernel that cannot run is an error under every GXUSIM_CHECKS mode,
and a mask Inductor drops for a gxu tile it did not plan is out of bounds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gxusim
import gxusim.emulator as emu
from triton_kernels import planted, reliability

# compiled kernels run on the session's target; these tests expect the emulator's errors
on_emulator = pytest.mark.skipif(gxusim.current_target() != "emulator",
                                 reason="the emulator's findings on compiled kernels")


@pytest.fixture(autouse=True)
def _raise_mode(monkeypatch) -> None:
    monkeypatch.setenv("GXUSIM_CHECKS", "raise")


def _compiled(fn, *args, dynamic: bool = False):
    """fn compiled for gxu on `args` (CPU tensors moved to gxu), back on the CPU."""
    torch._dynamo.reset()
    out = torch.compile(fn, dynamic=dynamic)(*[a.to("gxu") for a in args])
    return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()


# ---------------------------------------------------------------- partial writes by design
def _scatter_inputs() -> tuple:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 10, 13, generator=g), torch.randint(0, 13, (4, 1, 1), generator=g)


PARTIAL_WRITES = {
    "scatter": (lambda t, idx: torch.scatter(t * 2, 2, idx, 0.8), _scatter_inputs),
    "index_put": (lambda t, i, v: torch.index_put(t + 1, (i,), v),
                  lambda: (torch.randn(4, 10, 13), torch.tensor([1, 3]), torch.randn(2, 10, 13))),
    "scatter_add": (lambda t, idx, v: (t * 1).scatter_add(0, idx, v),
                    lambda: (torch.zeros(7, 5), torch.randint(0, 7, (20, 5)), torch.randn(20, 5))),
}


@pytest.mark.parametrize("case", sorted(PARTIAL_WRITES))
def test_scatters_into_a_filled_buffer_are_not_uncovered(case: str) -> None:
    fn, inputs = PARTIAL_WRITES[case]
    args = inputs()
    torch.testing.assert_close(_compiled(fn, *args), fn(*args))


def _set_column(x):
    x[:, 1] = 0
    return x.sum()


def _copy_rows(x, y):
    x[2:5].copy_(y)
    return x * 1


def _scale_every_other_row(x):
    x[::2].mul_(3)


@pytest.mark.parametrize("fn,shapes", [(_set_column, [(8, 6)]), (_copy_rows, [(8, 6), (3, 6)]),
                                       (_scale_every_other_row, [(8, 6)])],
                         ids=["set_column", "copy_rows", "scale_every_other_row"])
def test_slices_assigned_into_inputs_are_not_uncovered(fn, shapes) -> None:
    # Inductor stores into the input's buffer where the slice lies (mutated_arg_names)
    args = [torch.randn(shape, generator=torch.Generator().manual_seed(k)) for k, shape in enumerate(shapes)]
    on_gxu = [a.to("gxu") for a in args]
    torch._dynamo.reset()
    got = torch.compile(fn)(*on_gxu)
    expected = fn(*args)
    if expected is not None:
        torch.testing.assert_close(got.cpu(), expected)
    for a, g in zip(args, on_gxu):
        torch.testing.assert_close(g.cpu(), a)


def test_declared_mutation_exempts_coverage_and_ordinary_outputs_stay_strict() -> None:
    rows = 40
    declared = emu.run_launch(reliability.column_assign_declared, (4,), [torch.ones(rows, 6), rows],
                              constexprs={"XBLOCK": 16}, compiler_generated=True)
    assert declared.ok and not [f for f in declared.findings if f.kind == "uncovered"]
    with pytest.raises(emu.EmulationError, match=r"uncovered: 200 of 240 element\(s\) of output out_ptr0"):
        emu.run_launch(reliability.column_assign_undeclared, (4,), [torch.ones(rows, 6), rows],
                       constexprs={"XBLOCK": 16}, compiler_generated=True)
    # a buffer reused in place is declared mutated too, but the kernel must write all of it
    with pytest.raises(emu.EmulationError, match="uncovered: 16 of 100 .* in_out_ptr0"):
        emu.run_launch(reliability.in_place_skips_first_tile, (4,), [torch.zeros(100), 100],
                       constexprs={"XBLOCK": 16}, compiler_generated=True)
    # and a planted kernel that forgets a tile is still caught
    with pytest.raises(emu.EmulationError, match="uncovered: 128 of 1000"):
        emu.run_launch(planted.gridstride_off_by_one, (4,), [torch.randn(1000), torch.empty(1000), 1000],
                       constexprs={"XBLOCK": 128}, compiler_generated=True)


# ---------------------------------------------------------------- while loops
def test_while_loop_as_the_tile_loop_counts_tiles() -> None:
    n = 1000
    x, out = torch.randn(n), torch.empty(n)
    report = emu.run_launch(reliability.gridstride_while, (3,), [x, out, n], constexprs={"XBLOCK": 64},
                            compiler_generated=True)
    assert report.ok and torch.equal(out, x * 3)
    assert report.tiles_per_program == [6, 5, 5]  # 16 tiles over 3 programs


def test_while_loop_carries_blocks_and_a_runtime_count() -> None:
    n = 777
    x = torch.randint(0, 1 << 30, (n,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    out = torch.empty(n, dtype=torch.int32)
    report = emu.emulate(reliability.isqrt_bisection, (7,), x, out, n, 16, XBLOCK=128)
    assert report.ok
    assert torch.equal(out, torch.from_numpy(np.floor(np.sqrt(x.numpy().astype(np.float64)))).int())


def test_while_on_a_block_is_unsupported_by_line() -> None:
    with pytest.raises(emu.EmulationError, match=r"unsupported: `while` on a block condition.*"
                                                 r"while_on_a_block line \d+: `while x > 0:`"):
        emu.emulate(reliability.while_on_a_block, (1,), torch.randn(16), torch.empty(16), XBLOCK=16)


def _values_and_boundaries() -> tuple:
    g = torch.Generator().manual_seed(0)
    values = torch.randn(3000, generator=g) * 2
    values[::97] = float("nan")
    return values, torch.linspace(-2, 2, 17)


BUCKETIZE = {  # Inductor's binary search (triton_helpers.bucketize_binary_search) loops in a `while`
    "left": (lambda v, b: torch.bucketize(v, b), _values_and_boundaries),
    "right": (lambda v, b: torch.bucketize(v, b, right=True), _values_and_boundaries),
    "int32": (lambda v, b: torch.bucketize(v, b, out_int32=True),
              lambda: (torch.randint(-20, 20, (999,)), torch.arange(-15, 15, 3))),
    "rows": (lambda s, v: torch.searchsorted(s, v),
             lambda: (torch.sort(torch.randn(4, 33), dim=1).values, torch.randn(4, 50))),
    "sorter": (lambda s, v, o: torch.searchsorted(s, v, sorter=o),
               lambda: (lambda s: (s, torch.randn(70), torch.argsort(s)))(torch.randn(40))),
}


# Eager CPU is the emulator's reference; on the GPU, Triton's kernels bucket NaN and flush
# denormals as stock Inductor's do there, so these two compare the emulator alone.
gpu_differs = pytest.mark.skipif(gxusim.current_target() != "emulator",
                                 reason="compares the emulator with eager CPU: on the GPU, NaN "
                                        "buckets and denormal frexp are Triton's, as stock "
                                        "Inductor's are")


@gpu_differs
@pytest.mark.parametrize("case", sorted(BUCKETIZE))
def test_bucketize_matches_eager(case: str) -> None:
    fn, inputs = BUCKETIZE[case]
    args = inputs()
    torch.testing.assert_close(_compiled(fn, *args), fn(*args), rtol=0, atol=0)


def test_bucketize_with_dynamic_boundaries_loops_at_runtime() -> None:
    fn = lambda v, b: torch.bucketize(v, b)  # noqa: E731
    for size in (5, 100):  # one graph: the boundaries' length is a runtime size
        g = torch.Generator().manual_seed(size)
        args = (torch.randn(600 + size, generator=g), torch.sort(torch.randn(size, generator=g)).values)
        torch.testing.assert_close(_compiled(fn, *args, dynamic=True), fn(*args), rtol=0, atol=0)


# ---------------------------------------------------------------- libdevice
def test_erfinv_matches_eager_to_float32_accuracy() -> None:
    y = torch.rand(20_000, generator=torch.Generator().manual_seed(0)) * 2 - 1
    edges = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.99999994, -0.99999994, 1e-30, -1e-38, 1.5, float("nan")])
    y = torch.cat([y, edges])
    got = _compiled(torch.erfinv, y)
    torch.testing.assert_close(got, torch.erfinv(y), equal_nan=True)
    assert torch.equal(torch.signbit(got[-10:-8]), torch.tensor([False, True]))


def _with_specials(n: int = 1000, scale: float = 3.0) -> torch.Tensor:
    x = torch.randn(n, generator=torch.Generator().manual_seed(1)) * scale
    x[:5] = torch.tensor([0.0, -0.0, float("inf"), float("nan"), 1e-40])
    return x


LIBDEVICE = {  # op, inputs, reference (eager, or float64 where eager's fp32 is the less exact)
    "ldexp": (torch.ldexp, lambda: (_with_specials(), torch.randint(-10, 10, (1000,))), None),
    "frexp": (torch.frexp, lambda: (_with_specials(),), None),
    "nextafter": (torch.nextafter, lambda: (_with_specials(), torch.randn(1000)), None),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.3),
                lambda: (_with_specials(), torch.randn(1000), torch.randn(1000)), None),
    "erfcx": (torch.special.erfcx, lambda: (_with_specials(),),
              lambda x: torch.special.erfcx(x.double()).float()),
    # eager's i0(inf) is NaN; libdevice's (and the emulator's) is inf
    "i0": (torch.i0, lambda: (_with_specials()[5:],), None),
    "i1": (torch.special.i1, lambda: (_with_specials()[5:],), None),
}


@gpu_differs
@pytest.mark.parametrize("case", sorted(LIBDEVICE))
def test_libdevice_calls_match_eager(case: str) -> None:
    fn, inputs, reference = LIBDEVICE[case]
    args = inputs()
    expected = (reference or fn)(*args)
    torch.testing.assert_close(_compiled(fn, *args), expected, equal_nan=True)


def test_libdevice_calls_inductor_writes_outside_torch_ops() -> None:
    n = 500
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.randn(n - 6, generator=g) * 100,
                   torch.tensor([2.5, -3.5, 1e-40, 0.0, float("inf"), float("nan")])])
    y = torch.randn(n, generator=g)
    outs = [torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int32), torch.empty(n),
            torch.empty(n)]
    report = emu.emulate(reliability.libdevice_calls, (4,), x, y, *outs, n, XBLOCK=128)
    assert report.ok
    finite = torch.isfinite(x)
    assert torch.equal(outs[0][finite], torch.round(x[finite]).long())  # round half to even
    assert torch.equal(outs[1][finite & (x != 0)], (torch.frexp(x).exponent - 1)[finite & (x != 0)])
    assert outs[1][-3:].tolist() == [-2**31, 2**31 - 1, -2**31]  # 0, inf, NaN as CUDA's ilogb
    torch.testing.assert_close(outs[2], x * y, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(outs[3], torch.tanh(x), equal_nan=True)


@on_emulator
def test_libdevice_calls_still_unemulated_are_unsupported_by_line() -> None:
    x = torch.randn(100)
    with pytest.raises(emu.EmulationError, match=r"unsupported: math function j0 \(not emulated\) "
                                                 r"at .* line \d+: `.*libdevice\.j0\("):
        _compiled(torch.special.bessel_j0, x)


# ---------------------------------------------------------------- check modes
@on_emulator
@pytest.mark.parametrize("mode", ["raise", "warn", "off"])
def test_a_kernel_that_cannot_run_is_an_error_in_every_mode(monkeypatch, mode: str) -> None:
    monkeypatch.setenv("GXUSIM_CHECKS", mode)
    out = torch.zeros(128)
    with pytest.raises(emu.EmulationError, match="unsupported: math function j0") as info:
        emu.emulate(planted.uses_bessel, (1,), torch.randn(128), out, XBLOCK=128)
    assert not info.value.report.ok
    assert torch.equal(out, torch.zeros(128))  # nothing ran, and nothing claims it did
    with pytest.raises(emu.EmulationError, match=r"unsupported: math function j0 .* line \d+: `.*j0\("):
        _compiled(torch.special.bessel_j0, torch.randn(1000))


def test_warn_downgrades_only_the_tiling_findings(monkeypatch) -> None:
    monkeypatch.setenv("GXUSIM_CHECKS", "warn")
    n = 1000
    with pytest.warns(RuntimeWarning, match="uncovered"):
        report = emu.run_launch(planted.gridstride_off_by_one, (4,), [torch.randn(n), torch.empty(n), n],
                                constexprs={"XBLOCK": 128}, compiler_generated=True)
    assert not report.ok and [f.kind for f in report.errors] == ["uncovered"]


# ---------------------------------------------------------------- dropped masks
def test_a_dropped_mask_under_a_larger_gxu_tile_is_out_of_bounds() -> None:
    n = 3 * 4096
    x = torch.randn(n)
    with pytest.raises(emu.EmulationError) as info:
        emu.run_launch(reliability.dropped_mask, (2,), [x, torch.empty(n), n],
                       constexprs={"XBLOCK": 8192}, compiler_generated=True)
    found = [f for f in info.value.report.errors if f.kind == "out_of_bounds"]
    assert [(f.program, f.buffer, f.offset) for f in found] == [(1, "in_ptr0", n), (1, "out_ptr0", n)]
    assert "4096 lane(s) in 1 program(s)" in found[0].message
    out = torch.empty(n)
    assert emu.run_launch(reliability.dropped_mask, (2,), [x, out, n], constexprs={"XBLOCK": 4096},
                          compiler_generated=True).ok
    assert torch.equal(out, x * 2)


def test_an_expression_written_again_is_one_value_and_computes_the_same() -> None:
    from gxusim.emulator.builder import build_ir
    from gxusim.emulator.ir import walk
    ir = build_ir(reliability.repeated_subexpressions,
                  {"out_ptr0": ("ptr", "fp32"), "xnumel": ("scalar", "int32"),
                   "XBLOCK": ("const", 64)})
    computed = [v for v in walk(ir.body) if getattr(v, "op", None) == "ew"]
    templates = [(v.attrs["tmpl"], tuple(a.attrs["value"] if a.op == "const" else a.id
                                         for a in v.args)) for v in computed]
    assert len(templates) == len(set(templates))  # no operation on the same operands twice
    out = torch.empty(1000)
    emu.emulate(reliability.repeated_subexpressions, (4,), out, 1000, XBLOCK=64)
    x = torch.arange(1000)
    low = (x - 1).clamp(min=0)
    high = torch.where(low <= x + 2, low, x + 2)
    torch.testing.assert_close(out, (high + low).float())
