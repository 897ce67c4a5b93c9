"""GXU code generation on the CPU: policies, the spec clamp, launch checks, generated kernels."""
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import gxusim
from gxusim.compiler.heuristics import GXUHeuristics, ReductionConfig, SeedHeuristics
from gxusim.compiler.plan import (KernelShape, PolicyError, candidate_plans, kernel_kind,
                                 kernel_shape_from_source, plan_launch, reduction_question)
from gxusim.compiler.shared_memory import gather_conversion_bytes
from gxusim.model.kernel_work import kernel_work
from gxusim.model.phases import kernel_phases, static_blocks
from gxusim.model.launch_facts import pipelined
from triton_kernels.generated import CHANNEL_SUM, EMBEDDING_SUM, TOKEN_NLL
from gxusim.compiler.policies import POLICIES, current_heuristics
from gxusim.findings import check_launch

POINTWISE = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
REDUCTION = KernelShape("r", ("in_ptr0", "out_ptr0", "xnumel", "r0_numel"), ("XBLOCK", "R0_BLOCK"), {})
# Inductor's no-x-dim persistent reduction: XBLOCK and R0_BLOCK are fixed in the body.
NO_X_DIM = KernelShape("p", ("in_ptr0", "out_ptr0", "xnumel", "r0_numel"), (),
                       {"XBLOCK": 1, "R0_BLOCK": 2048})


# (numel, XBLOCK, num_warps, grid) from the seed's formulas (chapter 10, 8.2), worked by hand:
# XBLOCK = 2**ceil(log2(max(ceil(n/32), 128))) clamped to [128, 1024];
# warps = min(2**ceil(log2(ceil(XBLOCK/32))), 16); grid = min(ceil(n/XBLOCK), 32).
SEED_TABLE = [
    (1000, 128, 4, 8),
    (4096, 128, 4, 32),
    (10_000, 512, 16, 20),
    (50_000, 1024, 16, 32),
    (100_000_000, 1024, 16, 32),
]


@pytest.mark.parametrize("numel,xblock,warps,grid", SEED_TABLE)
def test_seed_policy_reproduces_the_seed_formulas(numel, xblock, warps, grid):
    seed = SeedHeuristics()
    assert seed.select_xblock(numel, torch.float32) == xblock
    assert seed.select_num_warps(xblock) == warps
    assert seed.get_grid(numel, xblock) == (grid,)
    plan = plan_launch(POINTWISE, {"xnumel": numel}, torch.float32, seed, gxusim.load_spec("gxu"))
    assert (plan.meta["XBLOCK"], plan.num_warps, plan.programs) == (xblock, warps, grid)


@pytest.mark.parametrize("policy", ["gxu", "seed"])
@pytest.mark.parametrize("numel", [1, 100, 4097, 1 << 20, 100_000_000])
def test_builtin_policies_stay_within_the_spec_and_cover_every_tile(policy, numel):
    spec = gxusim.load_spec("gxu")
    heuristics = POLICIES[policy]()
    for shape, numels in ((POINTWISE, {"xnumel": numel}),
                          (REDUCTION, {"xnumel": numel, "r0_numel": 3000})):
        plan = plan_launch(shape, numels, torch.float32, heuristics, spec)
        assert 1 <= plan.programs <= spec.max_grid and plan.num_warps <= spec.max_num_warps
        assert plan.programs * plan.tiles_per_program >= plan.n_tiles


def test_blocks_fixed_by_the_kernel_are_not_passed_and_set_the_tile_count():
    spec = gxusim.load_spec("gxu")
    plan = plan_launch(NO_X_DIM, {"xnumel": 100, "r0_numel": 2000}, torch.float32,
                       gxusim.compiler.GXUHeuristics(), spec)
    assert plan.meta == {}  # nothing to pass: the kernel takes no block parameter
    assert plan.n_tiles == 100 and plan.programs == 32 and plan.tiles_per_program == 4


class Greedy(gxusim.Heuristics):
    """A vendor policy asking for more than the GXU allows."""
    name = "greedy"

    def select_xblock(self, numel, dtype):
        return 256

    def select_num_warps(self, xblock):
        return 64

    def get_grid(self, numel, xblock):
        return (1000,)


def test_spec_clamps_a_policy_that_asks_too_much():
    plan = plan_launch(POINTWISE, {"xnumel": 1 << 20}, torch.float32, Greedy(), gxusim.load_spec("gxu"))
    assert plan.num_warps == 16 and plan.programs == 32
    assert "max_num_warps" in plan.rules["num_warps"] and "max_grid" in plan.rules["grid"]


class Broken(Greedy):
    def select_xblock(self, numel, dtype):
        return 1000  # not a power of two: tl.arange cannot build it


def test_policy_returning_an_unusable_block_is_rejected():
    with pytest.raises(PolicyError, match="select_xblock returned 1000"):
        plan_launch(POINTWISE, {"xnumel": 4096}, torch.float32, Broken(), gxusim.load_spec("gxu"))


def test_use_heuristics_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown heuristics policy"):
        gxusim.use_heuristics("fastest")


@pytest.mark.parametrize("grid,warps,kind", [((64,), 4, "grid_cap"), ((8, 8), 4, "grid_cap"),
                                             ((32,), 32, "warp_cap")])
def test_launch_check_raises_naming_kernel_limit_and_value(grid, warps, kind):
    with pytest.raises(gxusim.GXULimitError) as error:
        check_launch(gxusim.load_spec("gxu"), grid, warps, "triton_poi_fused_0")
    (finding,) = error.value.findings
    assert finding.kind == kind and finding.kernel == "triton_poi_fused_0"
    assert ("max_grid = 32" if kind == "grid_cap" else "max_num_warps = 16") in finding.message


COMPILE_SCRIPT = textwrap.dedent("""
    import torch, gxusim
    from gxusim.report import run_case
    from gxusim.models import CASES
    torch._inductor.config.force_disable_caches = True
    for name in ("add_relu", "transpose", "row_sum"):
        result = run_case(CASES[name], "cpu")
        code = gxusim.last_generated_code()
        assert result.matches_eager, (name, result.max_error)
        assert result.launches and not result.violations, (name, result.violations)
        assert "in range(tl.program_id(0)" in code and "tl.num_programs(0)" in code, code
        print(name, "ok", [(l.grid, l.num_warps) for l in result.launches])
""")


def test_compiled_models_match_eager_with_capped_tile_loops():
    # An executor independent of gxusim's emulator runs the generated kernels: the GPU where
    # there is one, else Triton's interpreter (enabled before triton is imported, hence the
    # subprocess; on the GPU machine's Triton 3.6 the interpreter crashes on capped kernels).
    env = {**os.environ, "GXUSIM_TARGET": "cuda"} if torch.cuda.is_available() else \
        {**os.environ, "TRITON_INTERPRET": "1", "GXUSIM_EMULATOR": "interpreter",
         "GXUSIM_TARGET": "emulator"}
    done = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count(" ok ") == 3


@pytest.mark.parametrize("shape", [POINTWISE, REDUCTION, NO_X_DIM], ids=lambda s: s.name)
def test_autotune_candidates_are_within_the_spec_and_pass_only_kernel_parameters(shape):
    spec = gxusim.load_spec("gxu")
    plans = candidate_plans(shape, {"xnumel": 5000, "r0_numel": 3000}, spec)
    assert plans
    for plan in plans:
        assert plan.programs <= spec.max_grid and plan.num_warps <= spec.max_num_warps
        assert set(plan.meta) <= set(shape.block_params)
    assert len({(tuple(p.meta.items()), p.num_warps, p.num_stages) for p in plans}) == len(plans)


class GXURules(GXUHeuristics):
    """The gxu policy's rules, for every kernel (what it answers without traits)."""
    SEES_KERNEL = False


def _planned(fn, shape, spec="gxu", policy=None):
    """The launches of `fn` compiled for a gxu tensor of `shape` under `spec` (and
    `policy`, else the active one), planned without running."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from gxusim.compiler import launcher
    torch._dynamo.reset()
    gxusim.clear_launches()
    before = current_heuristics()
    gxusim.use_heuristics(policy or before)
    try:
        with gxusim.use_spec(spec), FakeTensorMode(), launcher.predict_only():
            torch.compile(fn)(torch.empty(*shape, device="gxu"))
    finally:
        gxusim.use_heuristics(before)
    return gxusim.launches()


def test_inductor_sees_the_active_specs_sm_count_after_a_change():
    """Inductor caches each device's properties for the process and decides with them (how
    many ways to split a reduction): a new spec clears them, entering and leaving."""
    from torch._inductor.runtime.hints import DeviceProperties
    device = torch.device("gxu", 0)
    many_sms = gxusim.load_spec("gxu").replace(name="gxu-132-sms", sm_count=132, max_grid=1024)
    with gxusim.use_spec("gxu"):
        assert DeviceProperties.create(device).multi_processor_count == 16
        with gxusim.use_spec(many_sms):
            assert DeviceProperties.create(device).multi_processor_count == 132
        assert DeviceProperties.create(device).multi_processor_count == 16


def test_inductor_does_not_split_a_reduction_for_sms_the_grid_cap_leaves_idle():
    """gxu-on-h200: 132 SMs, 32 programs. 256 rows fill the 32 programs; Inductor, told of
    132 SMs, would split the rows in two kernels to fill them."""
    h200_limits = gxusim.load_spec("gxu-on-h200")
    assert h200_limits.sm_count > h200_limits.max_grid
    launches = _planned(lambda t: t.sum(1), (256, 1 << 20), spec=h200_limits)
    assert [launch.meta["xnumel"] for launch in launches] == [256]


def test_gxu_asks_for_wide_tiles_where_a_reduction_loads_along_columns():
    """A sum over dim 0 loads contiguously along x: the plan asks the policy's column question
    (128 columns a tile under gxu); a sum over dim 1 asks the one-pass row question."""
    column, = _planned(lambda t: t.sum(0), (16384, 4096), policy=GXURules())
    assert column.rules["XBLOCK"] == "gxu.select_column_reduction"
    assert column.meta["XBLOCK"] == 128
    row, = _planned(lambda t: t.sum(1), (256, 1 << 20), policy=GXURules())
    assert row.rules["XBLOCK"] == "gxu.select_one_pass_reduction"


@pytest.mark.parametrize("spec", ["gxu", "gxu-on-h200"])
def test_one_pass_reductions_stream_pipelined_chunks_and_multi_pass_ones_do_not(spec):
    """A sum reads each row once: its chunk loop is pipelined (num_stages chunks in flight,
    NUM_STAGES passed to the kernel) within each resident program's share of shared
    memory; softmax re-reads its rows in later loops and is not pipelined."""
    loaded = gxusim.load_spec(spec)
    row_sum, = _planned(lambda t: t.sum(1), (32768, 4096), spec, GXURules())
    assert row_sum.rules["XBLOCK"] == "gxu.select_one_pass_reduction"
    stages = row_sum.meta["NUM_STAGES"]
    chunk_bytes = row_sum.meta["XBLOCK"] * row_sum.meta["R0_BLOCK"] * 4
    sharing = min(loaded.max_blocks_per_sm, -(-loaded.max_grid // loaded.sm_count))
    assert stages == 4 and (stages - 1) * chunk_bytes <= loaded.smem_per_sm // sharing
    softmax, = _planned(lambda t: t.softmax(-1), (4096, 8192), spec, GXURules())
    assert softmax.rules["XBLOCK"] == "gxu.select_reduction"
    assert softmax.meta["NUM_STAGES"] == 1


@pytest.mark.parametrize("spec", ["gxu", "gxu-on-h200"])
def test_a_few_long_rows_a_program_are_reduced_side_by_side(spec):
    """Rows of 32K elements and more: where each program has a few rows to reduce, gxu puts
    them side by side in one tile (every program's share one tile, none left reducing a row
    alone), the tile's elements as for one row; with many rows a program, one row a tile."""
    gxu = GXUHeuristics(gxusim.load_spec(spec))
    programs = gxusim.load_spec(spec).max_grid
    for rows in (programs + 1, 2 * programs - 3, 5 * programs):
        few = gxu.select_reduction(rows, 25088, torch.float32)
        assert few.xblock > 1 and -(-rows // few.xblock) <= programs, (rows, few)
        assert few.xblock * few.rblock == GXUHeuristics.LONG_ROW_CHUNK
    many = gxu.select_reduction(64 * programs, 32768, torch.float32)
    assert (many.xblock, many.rblock) == (1, GXUHeuristics.LONG_ROW_CHUNK)


def test_a_policy_asking_for_more_stages_than_shared_memory_holds_is_lowered():
    from gxusim.compiler.heuristics import ReductionConfig, SeedHeuristics

    class Greedy(SeedHeuristics):
        name = "greedy"

        def select_reduction(self, xnumel, rnumel, dtype):
            return ReductionConfig(64, 512, 16, num_stages=8)  # 128 KB chunks
    with gxusim.use_heuristics(Greedy()):
        launch, = _planned(lambda t: t.sum(1), (4096, 4096), "gxu-on-h200")
    assert launch.meta["NUM_STAGES"] == 2  # one 128 KB chunk ahead fits in 228 KiB, two do not
    assert "lowered to 2" in launch.rules["num_stages"]
    assert "232448 B of shared memory" in launch.rules["num_stages"]


def test_a_value_loaded_under_the_chunk_mask_is_buffered_as_a_whole_chunk():
    """A pipelined stage copies each load of the chunk loop at the shape of the value it
    gives: a per-channel mean loaded through `tl.broadcast_to` under the chunk's mask is a
    whole chunk, a per-channel scale under the rows' mask alone a vector. Counted as a
    vector, the mean let 4 stages of 128 x 128 through, which asked an H100 for more shared
    memory than it has."""
    from gxusim.compiler.shared_memory import deepest_fitting_stages
    from gxusim.model.launch_facts import chunk_load_bytes
    spec = gxusim.load_spec("gxu-on-h200")
    for rows, chunk in ((128, 64), (128, 128)):
        blocks = {"XBLOCK": rows, "R0_BLOCK": chunk}
        whole, vector = rows * chunk * 4, rows * 4
        assert chunk_load_bytes(CHANNEL_SUM, blocks) == 2 * whole + vector
    stages = deepest_fitting_stages(chunk_load_bytes(CHANNEL_SUM, blocks), blocks, 8, spec)
    assert stages == 2 and (stages - 1) * (2 * whole + vector) <= spec.program_smem


def test_pipelining_is_lowered_where_the_binary_takes_more_shared_memory_than_a_program_has():
    """Beside the chunks it buffers, Triton may convert a value's layout through shared
    memory (some versions do for a Welford chunk): where one chunk more would not fit, the
    plan asks the binary compiled for the spec, and lowers the depth until it fits."""
    from gxusim.compiler.plan import LaunchPlan, kernel_shape_from_source
    from gxusim.compiler.shared_memory import within_shared_memory
    shape = kernel_shape_from_source(CHANNEL_SUM, "triton_red_fused_native_batch_norm_backward_0")
    spec = gxusim.load_spec("gxu-on-h200")
    asked = []

    def binary(constexprs, num_warps, num_stages):  # a binary that takes a chunk more
        asked.append(num_stages)
        return num_stages * 2 * 64 * 128 * 4
    deep = LaunchPlan({"XBLOCK": 64, "R0_BLOCK": 128}, 8, 32, 65, {"num_stages": "asked"}, 4)
    lowered = within_shared_memory(shape, deep, spec, binary)
    assert lowered.num_stages == 3 and asked == [4, 3]
    assert "the binary takes 262144 B" in lowered.rules["num_stages"]
    assert within_shared_memory(shape, deep, spec, lambda *a: None) == deep  # no binary here
    asked.clear()
    shallow = dataclasses.replace(deep, meta={"XBLOCK": 16, "R0_BLOCK": 128})
    assert within_shared_memory(shape, shallow, spec, binary) == shallow and not asked


def test_chunk_loops_are_generated_pipelined_by_a_kernel_parameter():
    from gxusim.compiler.inductor_registration import last_generated_code
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        x = torch.randn(64, 3000)
        got = torch.compile(lambda t: t.sum(1))(x.to("gxu"))
    code = last_generated_code()
    assert "tl.range(0, r0_numel, R0_BLOCK, num_stages=NUM_STAGES)" in code
    assert "R0_BLOCK : tl.constexpr, NUM_STAGES : tl.constexpr):" in code
    torch.testing.assert_close(got.cpu(), x.sum(1), rtol=1e-4, atol=1e-4)  # summation order


def test_a_policy_without_the_column_question_answers_it_with_select_reduction():
    with gxusim.use_heuristics("seed"):
        column, = _planned(lambda t: t.sum(0), (16384, 4096))
    assert column.rules["XBLOCK"] == "seed.select_column_reduction"
    assert (column.meta["XBLOCK"], column.meta["R0_BLOCK"]) == (1, 512)  # the seed's row answer


def test_pointwise_kernel_inductor_would_tile_over_three_axes_runs_on_two():
    # Inductor's coalescing analysis tiles this sum of three differently permuted cubes over
    # z, y and x (seen in resnet18's backward); gxu's tile loop covers two grid axes, so
    # Inductor must pick its best two-axis tiling instead of handing gxu a 3-axis grid.
    def fn(a, b, c):
        return a.permute(2, 0, 1) + b.permute(1, 2, 0) + c

    a, b, c = (torch.randn(64, 64, 64) for _ in range(3))
    torch._dynamo.reset()
    gxusim.clear_launches()
    actual = torch.compile(fn)(a.to("gxu"), b.to("gxu"), c.to("gxu"))
    torch.testing.assert_close(actual.cpu(), fn(a, b, c))
    (launch,) = gxusim.launches()
    assert "YBLOCK" in launch.meta
    check_launch(gxusim.current_spec(), launch.grid, launch.num_warps, launch.kernel)


def test_binary_launch_key_tells_apart_what_triton_specializes_on():
    # The cuda target reuses a compiled binary only for arguments with the same key, so the
    # key must change wherever Triton's JIT would compile another binary.
    from gxusim.device.native import native
    aligned = torch.zeros(64)
    key = native.launch_key
    assert key((aligned, 1000)) == key((torch.ones(64), 2024))  # same dtype, alignment, int class
    assert key((aligned,)) != key((aligned[1:],))  # 4 bytes off a 16-byte boundary
    assert key((aligned,)) != key((aligned.double(),))
    assert len({key((n,)) for n in (1, 16, 17, 2**31, 2**31 + 1)}) == 5  # one, /16, other, int64 twice
    assert key([2**70]) != key([2**71])  # beyond 64 bits: the value itself
    assert key((1.0, True, None)) == (float, bool, type(None))
    with pytest.raises(TypeError, match="sequence"):
        key(5)


def test_chunks_buffered_ahead_take_shared_memory_in_the_plan_and_the_occupancy_model():
    """A chunk loop pipelined N deep buffers N - 1 chunks in shared memory: the plan lowers a
    depth that would not fit beside the reduction's scratch, and the emulator's occupancy
    counts the buffers (GXU: 128 KB per SM, so one 64 KB chunk ahead leaves room for one
    resident program, not two); a loop of one chunk, which Triton does not pipeline,
    buffers none."""
    from gxusim.compiler import launcher
    from gxusim.compiler.heuristics import ReductionConfig, SeedHeuristics

    class Deep(SeedHeuristics):
        name = "deep"

        def __init__(self, stages, rblock=1024):
            super().__init__()
            self.stages, self.rblock = stages, rblock

        def select_one_pass_reduction(self, xnumel, rnumel, dtype):
            # 64 KB chunks
            return ReductionConfig(16 * 1024 // self.rblock, self.rblock, 4, num_stages=self.stages)
    planned = {}
    # (columns, R0_BLOCK, num_stages): 4 chunks a row unpipelined and pipelined, 1 chunk
    # (launched at the depth asked, whatever the plan made of it)
    for columns, rblock, stages in ((4096, 1024, 1), (4096, 1024, 3), (2048, 2048, 3)):
        with gxusim.use_heuristics(Deep(stages, rblock)), launcher.capture() as captured:
            torch._dynamo.reset()
            torch.compile(lambda t: t.sum(1))(torch.randn(256, columns).to("gxu"))
        launch, = captured
        args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in launch.args]
        meta = launch.plan.kernel_meta(launch.kernel.shape)
        if columns == rblock:
            meta["NUM_STAGES"] = stages
        report = gxusim.emulate(launch.kernel.fn, launch.plan.grid, *args,
                                num_warps=launch.plan.num_warps, spec="gxu", **meta)
        planned[columns, stages] = launch.plan, report.occupancy
    (_, alone), (deep, buffered) = planned[4096, 1], planned[4096, 3]
    assert deep.num_stages == 2 and "lowered to 2" in deep.rules["num_stages"]
    assert alone.blocks_per_sm == 2
    assert buffered.blocks_per_sm == 1 and buffered.limiter == "shared_memory"
    # one 64 KB chunk a row: the plan says it is not pipelined, and at num_stages 3 the
    # emulator buffers nothing for it either
    one_chunk, unbuffered = planned[2048, 3]
    assert one_chunk.num_stages == 1 and "one chunk" in one_chunk.rules["num_stages"]
    assert unbuffered.blocks_per_sm == 2


def test_the_emulator_reports_a_program_that_takes_more_shared_memory_than_the_spec_gives():
    """A sum pipelined 4 deep in 64 KB chunks buffers 192 KB, over the 127 KiB a GXU
    program may take: the GPU would refuse to load it (Triton's OutOfResources), and the
    emulator, which would run it, reports it as an error naming both sizes; 2 deep fits."""
    from gxusim.compiler import launcher
    from gxusim.compiler.heuristics import ReductionConfig, SeedHeuristics
    from gxusim.emulator import EmulationError

    class Chunked(SeedHeuristics):
        name = "chunked"

        def select_one_pass_reduction(self, xnumel, rnumel, dtype):
            return ReductionConfig(16, 1024, 4, num_stages=2)  # 64 KB chunks
    with gxusim.use_heuristics(Chunked()), launcher.capture() as captured:
        torch._dynamo.reset()
        torch.compile(lambda t: t.sum(1))(torch.randn(256, 4096).to("gxu"))
    launch, = captured
    args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in launch.args]
    meta = launch.plan.kernel_meta(launch.kernel.shape)
    assert meta["NUM_STAGES"] == 2

    def emulate(stages):
        return gxusim.emulate(launch.kernel.fn, launch.plan.grid, *args,
                              num_warps=launch.plan.num_warps, spec="gxu",
                              **{**meta, "NUM_STAGES": stages})
    assert not [f for f in emulate(2).findings if f.kind == "shared_memory"]
    with pytest.raises(EmulationError) as raised:
        emulate(4)
    finding, = [f for f in raised.value.report.findings if f.kind == "shared_memory"]
    assert finding.severity == "error"
    assert "196864 B" in finding.message and "130048 B" in finding.message


def test_pipelining_rewrite_leaves_loopless_kernels_alone_and_refuses_an_unknown_signature():
    from gxusim.compiler.inductor_codegen import pipelined_chunk_loops
    pointwise = "\ndef k(in_ptr0, xnumel, XBLOCK : tl.constexpr):\n    pass\n"
    assert pipelined_chunk_loops(pointwise) == pointwise
    looped = ("\ndef k(in_ptr0, r0_numel, RBLOCK : tl.constexpr):\n"
              "    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):\n        pass\n")
    with pytest.raises(RuntimeError, match="inductor_codegen.py"):
        pipelined_chunk_loops(looped)  # the loop is there, the R0_BLOCK parameter is not



def test_a_predicted_model_compiles_without_frames_dynamo_cannot_trace():
    """Predict-only traces with the device's hooks inside the frame (the current stream,
    through the device guard): a frame Dynamo could not trace there cost every compile a
    failed trace, half a small model's predict-only time."""
    from gxusim.models import CASES
    from gxusim.predict import predict_case
    torch._dynamo.utils.counters.clear()
    launches, = predict_case(CASES["add_relu"], 1 << 20, ["gxu"])
    assert len(launches) == 1
    counters = torch._dynamo.utils.counters
    assert dict(counters["unimplemented"]) == {}  # what Dynamo could not trace
    assert counters["frames"]["ok"] == counters["frames"]["total"]
    assert counters["stats"]["unique_graphs"] == 1


def test_a_forward_is_run_and_predicted_as_inference(monkeypatch):
    """A forward compiles the inference graph, on the target and in predict-only alike, so a
    prediction is of the kernels a run times; compiled with autograd on it would be a training
    step's forward (the mlp's bias add kept out of its GELU, the addmm's output saved for a
    backward that never runs)."""
    from gxusim import predict
    from gxusim.models import CASES
    from gxusim.report import run_case

    def kernels(launches: list) -> list[str]:
        return sorted(launch.kernel for launch in launches)
    inference, = predict.predict_case(CASES["mlp"], "cpu", ["gxu"])
    monkeypatch.setattr(predict, "step_mode", lambda train: torch.enable_grad())
    training_forward, = predict.predict_case(CASES["mlp"], "cpu", ["gxu"])
    assert kernels(inference) != kernels(training_forward)
    measured = run_case(CASES["mlp"], "cpu")
    assert measured.matches_eager
    assert kernels(measured.launches) == kernels(inference)




EMBEDDING_SHAPE = KernelShape("triton_red_fused_embedding_sum_0",
                              ("in_ptr0", "in_ptr1", "out_ptr0", "xnumel", "r0_numel"),
                              ("XBLOCK", "R0_BLOCK"), static_blocks(EMBEDDING_SUM), EMBEDDING_SUM,
                              kernel_work(EMBEDDING_SUM), pipelined=True, chunk_loops=1)
EMBEDDING_NUMELS = {"xnumel": 262144, "r0_numel": 256}


class _WideGathers(SeedHeuristics):
    name = "wide_gathers"
    num_stages = 1

    def select_gather_reduction(self, xnumel, rnumel, dtype):
        return ReductionConfig(128, 256, 16, self.num_stages)


def test_unpipelined_gathers_whose_indices_overflow_shared_memory_are_not_planned():
    # Unpipelined, Triton converts the gather's int64 index block to the table rows' layout
    # through shared memory: the H200 refused 128 x 256 of them ("out of resource: shared
    # memory, Required: 262144, Hardware limit: 232448"), which the candidates had offered.
    spec, shape = gxusim.load_spec("gxu-on-h200"), EMBEDDING_SHAPE
    assert gather_conversion_bytes(EMBEDDING_SUM, {"XBLOCK": 128, "R0_BLOCK": 256}) \
        == 262144
    # indices computed from 4-byte loads are int64s all the same (the H200 refused a
    # calibration gather's 128 x 256 block alike)
    from_floats = EMBEDDING_SUM.replace("'in_ptr0': '*i64'", "'in_ptr0': '*fp32'")
    assert from_floats != EMBEDDING_SUM
    assert gather_conversion_bytes(from_floats, {"XBLOCK": 128, "R0_BLOCK": 256}) == 262144
    plans = candidate_plans(shape, EMBEDDING_NUMELS, spec)
    # Triton does not pipeline a loop of one chunk (all 256 ids at once): whatever its
    # num_stages, such a plan converts its indices as an unpipelined one does
    unpipelined = [p for p in plans if not pipelined(p.num_stages or 1, p.chunks(EMBEDDING_NUMELS))]
    one_chunk = [p for p in plans if p.chunks(EMBEDDING_NUMELS) == 1]
    assert one_chunk and {p.num_stages for p in one_chunk} == {1}  # one depth: all compile alike
    for plan in unpipelined:
        needed = gather_conversion_bytes(EMBEDDING_SUM, plan.meta)
        assert needed + plan.meta["XBLOCK"] * plan.num_warps * 4 <= spec.program_smem, plan
    assert {"XBLOCK": 64, "R0_BLOCK": 256} in [p.meta for p in unpipelined]  # 128 KB: fits
    assert {"XBLOCK": 128, "R0_BLOCK": 128} in [p.meta for p in plans if p.num_stages == 2]
    for stages in (1, 4):
        wide = _WideGathers()
        wide.num_stages = stages
        with pytest.raises(PolicyError, match=r"wide_gathers.*232448 B a program has.*num_stages"):
            plan_launch(shape, EMBEDDING_NUMELS, torch.float32, wide, spec)


def test_gathers_are_asked_as_gathers_and_gxu_leaves_them_unpipelined():
    # Pipelined, a gather loads its table rows one element a thread (the indices keep their
    # copies' layout): the H200 ran the gxu policy's pipelined embedding sum 3x slower than
    # the best unpipelined plan. The seed's answer is its one-pass one, as before.
    spec, shape = gxusim.load_spec("gxu-on-h200"), EMBEDDING_SHAPE
    assert shape.gathers and not REDUCTION.gathers
    gxu = plan_launch(shape, EMBEDDING_NUMELS, torch.float32, POLICIES["gxu"](), spec)
    assert gxu.rules["R0_BLOCK"].startswith("gxu.select_gather_reduction")
    assert gxu.num_stages == 1 and gxu.meta == {"XBLOCK": 128, "R0_BLOCK": 64}
    seed = plan_launch(shape, EMBEDDING_NUMELS, torch.float32, SeedHeuristics(), spec)
    one_pass = SeedHeuristics().select_one_pass_reduction(262144, 256, torch.float32)
    assert (seed.meta["XBLOCK"], seed.meta["R0_BLOCK"]) == (one_pass.xblock, one_pass.rblock)


def test_a_gather_of_one_element_a_row_is_asked_as_a_one_pass_reduction():
    """A loss that gathers one logit per token (its index loaded along the reduced axis) has
    no table rows to lay out: it is a one-pass reduction, not an embedding-bag gather, and
    the gathered load is contiguous along no axis (a loaded index strides by its values)."""
    shape = kernel_shape_from_source(TOKEN_NLL, "triton_red_fused_nll_loss_forward_0")
    assert not shape.gathers and kernel_kind(shape) == "looped_reduction"
    assert reduction_question(shape) == "select_one_pass_reduction"
    (loop,) = [phase for phase in kernel_phases(TOKEN_NLL) if phase.looped]
    ids, logits = loop.accesses[:2]
    assert (ids.depth, ids.unit_axes) == (1, frozenset("r"))
    assert (logits.depth, logits.unit_axes) == (2, frozenset())
    embedding = kernel_shape_from_source(EMBEDDING_SUM, "triton_red_fused_embedding_sum_0")
    assert embedding.gathers and kernel_kind(embedding) == "gather_reduction"


def test_compiled_dropout_draws_tritons_random_numbers_and_its_backward_keeps_the_mask():
    """Inductor's dropout calls tl.rand inside the kernel: it runs (on the emulator, Philox
    as Triton computes it), drops about p, scales the rest, and the same seed gives the same
    mask; its backward passes the gradient through the kept elements only."""
    import torch.nn.functional as F
    torch._dynamo.reset()
    dropout = torch.compile(lambda t: F.dropout(t, 0.3, training=True))
    with torch.random.fork_rng(device_type="gxu"):
        torch.manual_seed(0)
        x = torch.rand(20000, device="gxu", requires_grad=True)
        y = dropout(x)
        kept = y != 0
        assert 0.28 < 1 - kept.float().mean().item() < 0.32
        torch.testing.assert_close(y[kept], x[kept] / 0.7)
        y.sum().backward()
        torch.testing.assert_close(x.grad, kept.float() / 0.7)
        torch.manual_seed(0)
        x.grad = None
        assert torch.equal(dropout(torch.rand(20000, device="gxu")) != 0, kept)
    torch._dynamo.reset()


def test_a_predicted_launch_is_modelled_from_the_binary_compiled_here_for_the_spec():
    """Predict-only runs nothing, yet Triton and its ptxas compile the kernel for the spec's
    sm on this machine: the record's facts are the plan's read against that binary (its
    registers, spills and loops), as the cuda target reads the binary it launches."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from gxusim.model import core, evidence
    from gxusim.compiler import launcher
    from gxusim.model.machine_code import cuda_tool
    if cuda_tool("cuobjdump") is None or cuda_tool("nvdisasm") is None:
        pytest.skip("no cuobjdump and nvdisasm beside Triton to read a binary")
    spec = gxusim.load_spec("gxu")
    torch._dynamo.reset()
    gxusim.clear_launches()
    with gxusim.use_spec(spec), FakeTensorMode(), launcher.predict_only(), \
            launcher.capture() as captured:
        torch.compile(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))(
            torch.empty(1 << 20, device="gxu"))
    (launch,), (seen,) = gxusim.launches(), captured
    binary = seen.kernel.spec_binary(seen.plan, spec)
    assert binary is not None and binary.code is not None
    plan_facts = seen.plan.facts(seen.kernel.shape, seen.kernel.numels(seen.args),
                                 seen.kernel.shape.argument_bytes(seen.args), spec)
    assert launch.facts == evidence.with_binary(plan_facts, spec, binary) != plan_facts
    assert launch.predicted_s == core.predict_seconds(launch.facts, spec)
    assert f"{binary.regs_per_thread} regs/thread" in launch.occupancy
    assert launch.occupancy.endswith(f"(compiled here for sm_{spec.ptxas_capability})")


def test_use_heuristics_as_a_context_gives_back_the_policy_before():
    """As `use_spec`: set for the block, the previous policy (the very object) restored."""
    before = current_heuristics()
    with gxusim.use_heuristics("seed") as seed:
        assert current_heuristics() is seed and seed.name == "seed"
    assert current_heuristics() is before
