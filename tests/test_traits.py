"""Kernel traits recorded by code generation, and the policy questions that receive them."""
import dataclasses
import math

import pytest
import torch

import gxusim
from gxusim.compiler.autotune import AutotuneHeuristics, local_search, plan_key
from gxusim.compiler.heuristics import GXUHeuristics, Heuristics, KernelQuestion, LaunchConfig
from gxusim.compiler.launcher import max_autotune_policy
from gxusim.compiler.plan import (KernelShape, kernel_question, plan_launch,
                                  ranked_plans)
from gxusim.traits import PHILOX_WORDS, Access, KernelTraits


def _traits_of(fn, *inputs) -> list[KernelTraits]:
    gxusim.clear_launches()
    torch.compile(fn)(*[t.to("gxu") for t in inputs])
    return [launch.traits for launch in gxusim.launches() if launch.policy != "extern"]


def test_a_softmax_records_its_reductions_and_a_contiguous_load_along_the_row():
    (traits,) = _traits_of(lambda t: t.softmax(-1), torch.randn(64, 300))
    assert traits.reductions == ("max", "sum")
    (load,) = traits.loads
    assert (load.dtype, load.bytes, load.contiguous, load.along_reduction, load.indirect) == \
        ("float32", 4, True, True, False)
    assert traits.transcendentals >= 1  # the exp
    assert any(not store.broadcast for store in traits.stores)


def test_an_embedding_lookup_records_an_indirect_load_and_its_int64_indices():
    table, ids = torch.randn(1000, 64), torch.randint(0, 1000, (32, 8))
    (traits,) = _traits_of(lambda t, i: t[i] * 2, table, ids)
    indirect = [a for a in traits.loads if a.indirect]
    assert indirect and indirect[0].dtype == "float32"
    assert any(a.dtype == "int64" and a.bytes == 8 and not a.indirect for a in traits.loads)
    assert traits.gathers


def test_a_bias_add_records_the_bias_as_broadcast_and_bf16_as_two_bytes():
    x, bias = torch.randn(512, 256).bfloat16(), torch.randn(256).bfloat16()
    (traits,) = _traits_of(lambda a, b: (a + b).relu(), x, bias)
    broadcast = {a.buffer: a.broadcast for a in traits.loads}
    assert sorted(broadcast.values()) == [False, True]
    assert all(a.bytes == 2 and a.dtype == "bfloat16" for a in traits.loads + traits.stores)
    assert traits.streams == 2 and traits.bytes_per_element == 4


def test_a_cumsum_records_a_scan_and_a_looped_sum_its_chunk_loop():
    (scan,) = _traits_of(lambda t: t.cumsum(-1), torch.randn(8, 3000))
    assert scan.scans == 1
    kernels = _traits_of(lambda t: t.sum(-1), torch.randn(16, 100_000))  # maybe split in two
    assert any(k.chunk_loops == 1 and k.reductions == ("sum",) for k in kernels)
    assert all(k.chunk_loops <= 1 and k.scans == 0 for k in kernels)


def test_registers_per_element_count_loads_and_a_looped_reductions_accumulators():
    (copy,) = _traits_of(lambda t: t * 2, torch.randn(4096))
    (gelu,) = _traits_of(lambda t: torch.nn.functional.gelu(t, approximate="tanh") * t.sigmoid(),
                         torch.randn(4096))
    (three,) = _traits_of(lambda a, b, c: a * b + c, *[torch.randn(4096)] * 3)
    assert copy.registers_per_element == gelu.registers_per_element == 1
    assert three.registers_per_element == 3
    assert gelu.live_values > copy.live_values
    assert gelu.flops > copy.flops and gelu.transcendentals > copy.transcendentals == 0
    kernels = _traits_of(lambda t: t.var(-1), torch.randn(8, 100_000))  # Welford, looped
    looped = next(k for k in kernels if k.chunk_loops)
    assert looped.registers_per_element >= 1 + 3


def test_a_scan_holds_what_each_element_computes_before_the_scan_for_the_whole_tile():
    """A block scan takes the tile's elements at once: a logcumsumexp of log|x| keeps the
    values each element computes before the scan for every element of a thread (ptxas on
    the corpus's scans: the estimate 1.3-2.5x its registers and spills, where counting
    loads alone gave a fifth of them and let tiles that spill hundreds of words through)."""
    x = torch.randn(64, 1000)
    (scan,) = _traits_of(lambda t: t.abs().log().logcumsumexp(-1), x)
    (pointwise,) = _traits_of(lambda t: t.abs().log().exp(), x)
    assert scan.scans == 1 and scan.live_values > 1
    assert scan.registers_per_element >= 1 + scan.live_values
    assert pointwise.registers_per_element == 1


def test_random_numbers_hold_philox_counters_for_every_element():
    """Triton's Philox runs its rounds on the whole tile at once: each random number keeps
    its four counter words for every element of a thread, as a block scan keeps its inputs."""
    x = torch.randn(4096)
    (dropout,) = _traits_of(lambda t: torch.nn.functional.dropout(t, 0.1, training=True) * 2, x)
    (scale,) = _traits_of(lambda t: t * 2, x)
    assert dropout.random_numbers == 1 and scale.random_numbers == 0
    assert dropout.registers_per_element >= scale.registers_per_element + PHILOX_WORDS


def test_a_large_dropouts_plan_does_not_spill_the_random_numbers_counters():
    """The rules' tile for 4M elements (32K on 16 warps: 64 elements a thread) spills once
    each element's Philox counters are held (ptxas, compiled here for the spec's GPU);
    counting them, gxu's register check moves the dropout to a tile that does not."""
    from gxusim.compiler import launcher
    from gxusim.model.machine_code import cuda_tool
    if cuda_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump beside Triton to read a binary's registers")
    torch._dynamo.reset()
    n = 1 << 22
    with launcher.capture() as captured:
        torch.compile(lambda t: torch.nn.functional.dropout(t, 0.1, training=True))(
            torch.randn(n, device="gxu"))
    torch._dynamo.reset()
    (launch,) = [c for c in captured if c.kernel.shape.traits.random_numbers]
    spec, rules = gxusim.current_spec(), GXUHeuristics()
    tile = rules.select_xblock(n, torch.float32)
    assert launch.kernel.spilled_words({"XBLOCK": tile}, rules.select_num_warps(tile), None, spec) > 0
    plan = launch.plan
    assert launch.kernel.spilled_words(plan.meta, plan.num_warps, plan.num_stages, spec) == 0


def test_a_flip_records_a_reversed_load_that_may_pipeline_its_chunk_loop():
    """A flipped row is read backwards: no unit stride, but each warp's reads are one run
    of memory, so the chunk loop may still pipeline; a row read across a permuted layout
    may not."""
    (flipped,) = _traits_of(lambda t: t.flip(-1).cumsum(-1), torch.randn(8, 3000))
    (load,) = flipped.loads
    assert (load.contiguous, load.reversed, load.coalesced, load.along_reduction) == \
        (False, True, True, True)
    rules = LaunchConfig({"XBLOCK": 64, "R0_BLOCK": 64}, 8, 4)
    reversed_rows = dataclasses.replace(_column_question(False, rules), traits=KernelTraits(
        (dataclasses.replace(load, buffer="in_ptr1"),), chunk_loops=1, flops=2))
    assert GXUHeuristics().choose_reduction(reversed_rows) is None  # the rules' 4 stages
    assert GXUHeuristics().choose_reduction(_column_question(False, rules)) == \
        dataclasses.replace(rules, num_stages=1)


def test_traits_travel_as_plain_data_and_come_back_equal():
    traits = KernelTraits((Access("in_ptr0", "float32", 4, True, False, False, True),),
                          (Access("out_ptr0", "float32", 4, True, True, False, False),),
                          ("sum",), 0, 1, 3, 1, 4)
    assert KernelTraits.from_dict(traits.as_dict()) == traits
    assert KernelTraits.from_dict({}) is None


class Recording(Heuristics):
    """Answers the pointwise question with a fixed config, remembering what it was asked."""
    name = "recording"

    def __init__(self, config):
        super().__init__()
        self.config, self.asked = config, []

    def choose_pointwise(self, kernel):
        self.asked.append(kernel)
        return self.config

    def get_grid(self, numel, xblock):
        return (1 << 20,)  # more than any spec allows: the clamp must cut it


def test_a_policy_that_sees_the_kernel_gets_its_traits_and_its_answer_is_clamped():
    recording = Recording(LaunchConfig({"XBLOCK": 2048}, num_warps=64))
    with gxusim.use_heuristics(recording):
        gxusim.clear_launches()
        torch.compile(lambda t: t.exp() + 1)(torch.randn(100_000, device="gxu"))
    (question,) = recording.asked
    assert question.kind == "pointwise" and question.numels == {"xnumel": 100_000}
    assert question.traits.transcendentals == 1 and question.dtype == torch.float32
    (launch,) = gxusim.launches()
    spec = gxusim.current_spec()
    assert launch.meta["XBLOCK"] == 2048
    assert launch.num_warps == spec.max_num_warps and launch.grid[0] == spec.max_grid
    assert "clamped" in launch.rules["num_warps"] and "clamped" in launch.rules["grid"]
    assert launch.rules["XBLOCK"] == "recording.choose_pointwise"


def test_an_answer_with_the_wrong_blocks_names_the_policy_and_the_kernel():
    with gxusim.use_heuristics(Recording(LaunchConfig({"XBLOCK": 1024, "R0_BLOCK": 64}, num_warps=4))):
        with pytest.raises(Exception, match="recording.*choose_pointwise.*takes"):
            torch.compile(lambda t: t + 1)(torch.randn(1000, device="gxu"))


POINTWISE = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {},
                        traits=KernelTraits((Access("in_ptr0", "float32", 4, True, False, False,
                                                    False),),
                                            (Access("out_ptr0", "float32", 4, True, False, False,
                                                    False),), flops=1, live_values=2))


def test_gxu_keeps_its_rules_for_a_kernel_whose_registers_fit():
    spec = gxusim.load_spec("gxu")
    plan = plan_launch(POINTWISE, {"xnumel": 1 << 24}, torch.float32, GXUHeuristics(), spec,
                       bytes_moved=8 << 24)
    assert plan.rules["XBLOCK"] == "gxu.select_xblock"


def test_gxu_gives_a_register_hungry_kernel_the_models_fastest_config_that_fits():
    """The rules' 32K-element tile on 16 warps holds 64 elements a thread: with eight
    loads each, 512 words, far past a thread's registers. gxu then takes the fastest
    predicted config that fits."""
    spec = gxusim.load_spec("gxu")
    loads = tuple(Access(f"in_ptr{i}", "float32", 4, True, False, False, False) for i in range(8))
    hungry = dataclasses.replace(POINTWISE, traits=dataclasses.replace(POINTWISE.traits,
                                                                       loads=loads))
    gxu, numels = GXUHeuristics(), {"xnumel": 1 << 24}
    plan = plan_launch(hungry, numels, torch.float32, gxu, spec, bytes_moved=8 << 24)
    assert plan.rules["XBLOCK"] == "gxu.choose_pointwise"
    question = kernel_question(hungry, numels, torch.float32, spec, 8 << 24)
    fitting = [c for c in question.candidates()
               if gxu.registers_per_thread(hungry.traits, c, spec) <= spec.register_budget(c.num_warps)]
    best = min(fitting, key=question.predict)
    assert (plan.meta, plan.num_warps) == (best.blocks, best.num_warps)
    lean = plan_launch(POINTWISE, numels, torch.float32, gxu, spec, bytes_moved=8 << 24)
    assert plan.meta["XBLOCK"] / plan.num_warps < lean.meta["XBLOCK"] / lean.num_warps


class RulesAlone(GXUHeuristics):
    name = "rules"
    SEES_KERNEL = False


def test_where_the_estimate_is_close_the_binary_decides_whether_a_tile_spills():
    """A kernel whose estimate lands between SURE_FIT and SURE_SPILL times the budget at
    the rules' tile: gxu compiles that tile; a binary that spills moves it to the model's
    fastest config whose binary does not, one that does not keeps the rules."""
    spec, gxu, numels = gxusim.load_spec("gxu"), GXUHeuristics(), {"xnumel": 1 << 24}
    loads = tuple(Access(f"in_ptr{i}", "float32", 4, True, False, False, False) for i in range(3))
    close = dataclasses.replace(POINTWISE, traits=dataclasses.replace(POINTWISE.traits,
                                                                      loads=loads))
    rules = plan_launch(close, numels, torch.float32, RulesAlone(), spec, bytes_moved=8 << 24)
    rules_config = LaunchConfig(rules.meta, rules.num_warps)
    estimate = gxu.registers_per_thread(close.traits, rules_config, spec)
    budget = spec.register_budget(rules.num_warps)
    assert gxu.SURE_FIT * budget < estimate <= gxu.SURE_SPILL * budget
    compiled = []

    def spills_at_the_rules_tile(constexprs, num_warps, num_stages):
        compiled.append((constexprs, num_warps))
        return 40 if (constexprs, num_warps) == (rules.meta, rules.num_warps) else 0
    moved = plan_launch(close, numels, torch.float32, gxu, spec, bytes_moved=8 << 24,
                        spills=spills_at_the_rules_tile)
    assert compiled[0] == (rules.meta, rules.num_warps)
    assert moved.rules["XBLOCK"] == "gxu.choose_pointwise"
    assert (moved.meta, moved.num_warps) != (rules.meta, rules.num_warps)
    assert len(compiled) <= 1 + gxu.MAX_BINARIES
    kept = plan_launch(close, numels, torch.float32, gxu, spec, bytes_moved=8 << 24,
                       spills=lambda constexprs, num_warps, num_stages: 0)
    assert (kept.meta, kept.num_warps) == (rules.meta, rules.num_warps)


def test_a_kernel_compiled_here_for_sm_90_reports_ptxas_registers_and_spills():
    """No GPU needed: Triton and its bundled ptxas compile for the spec's capability. A
    wide tile of many streams on 16 warps (128 registers a thread) spills; one element a
    thread on 4 warps (255 registers) does not, whichever torch generated the kernel (torch
    2.11's version keeps libdevice's sine reduction array in an 8-word stack frame at every
    tile: not a spill)."""
    from gxusim.compiler import launcher
    from gxusim.model.machine_code import cuda_tool
    if cuda_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump beside Triton to read a binary's registers")
    torch._dynamo.reset()
    inputs = [torch.randn(1 << 16, device="gxu") for _ in range(8)]
    with launcher.capture() as captured:
        torch.compile(lambda *ts: sum(t.sin() * t.cos() for t in ts))(*inputs)
    torch._dynamo.reset()
    (kernel,) = {c.kernel for c in captured}
    spec = gxusim.load_spec("gxu")
    assert kernel.spilled_words({"XBLOCK": 128}, 4, None, spec) == 0
    assert kernel.spilled_words({"XBLOCK": 4096}, 16, None, spec) > 0  # 8 of 8 streams a thread


def test_a_kernel_without_traits_is_planned_by_the_rules():
    spec = gxusim.load_spec("gxu")
    bare = dataclasses.replace(POINTWISE, traits=None)
    plan = plan_launch(bare, {"xnumel": 1 << 24}, torch.float32, GXUHeuristics(), spec)
    assert plan.rules["XBLOCK"] == "gxu.select_xblock"


def test_autotune_climbs_from_the_rules_plan_and_the_models_picks_to_the_best():
    """On a landscape with a second, lower peak (small tiles on few warps), a climb from
    the model's wrong first pick alone would stop there; the climb from the rules' plan
    reaches the best, and no config is timed twice."""
    spec = gxusim.load_spec("gxu")
    numels = {"xnumel": 1 << 24}
    ranked = ranked_plans(POINTWISE, numels, spec, 8 << 24)
    best = max(ranked, key=lambda p: (p.meta["XBLOCK"], p.num_warps))

    def seconds(plan):  # 1 at the best; a local best at the smallest tile on one warp
        if plan.meta["XBLOCK"] == ranked[-1].meta["XBLOCK"] and plan.num_warps == 1:
            return 1.5
        if (plan.meta, plan.num_warps) == (best.meta, best.num_warps):
            return 1.0
        return 2.0 + abs(plan.meta["XBLOCK"].bit_length() - best.meta["XBLOCK"].bit_length()) \
            + abs(plan.num_warps.bit_length() - best.num_warps.bit_length())
    timed_plans = []

    def time_plan(plan):
        timed_plans.append(plan_key(plan))
        return seconds(plan)
    rules = plan_launch(POINTWISE, numels, torch.float32, GXUHeuristics(), spec)
    trap = [p for p in ranked if seconds(p) == 1.5]
    timed = local_search(trap + ranked, rules, time_plan, plan_key, first=1)
    assert plan_key(min(timed, key=lambda item: item[0])[1]) == plan_key(best)
    assert len(timed_plans) == len(set(timed_plans)) < len(ranked)
    alone = local_search(trap + ranked, None, seconds, plan_key, first=1)
    assert min(s for s, _ in alone) == 1.5  # the trap, without the rules' start


def test_autotune_reaches_any_pipelining_depth_and_a_tile_resized_with_its_warps():
    """Pipelined or not is no doubling away: on a chunk loop slow at 2 and 3 stages and
    fastest at 4, a climb from 1 stage reaches 4. And where halving the tile alone and
    halving the warps alone are each slower, halving both (each thread keeping its
    elements) is a step the climb takes."""
    from gxusim.compiler.autotune import config_key

    def key(config):
        return config_key(config[0], config[1], config[2])
    space = [({"XBLOCK": x, "R0_BLOCK": 64}, w, s) for x in (16, 32, 64, 128)
             for w in (4, 8, 16) for s in (1, 2, 3, 4)]
    depth = {1: 2.0, 2: 3.0, 3: 2.5, 4: 1.0}

    def pipelined(config):
        return depth[config[2]] + (0 if (config[0]["XBLOCK"], config[1]) == (64, 8) else 1)
    timed = local_search(space, ({"XBLOCK": 64, "R0_BLOCK": 64}, 8, 1), pipelined, key, first=0)
    assert min(timed, key=lambda item: item[0]) == (1.0, ({"XBLOCK": 64, "R0_BLOCK": 64}, 8, 4))

    def resized(config):  # fastest at 32 rows on 4 warps; 64 on 8 is a local best alone
        blocks, warps = config[0]["XBLOCK"], config[1]
        return {(32, 4): 1.0, (64, 8): 1.5}.get((blocks, warps), 3.0) + (config[2] - 1)
    start = ({"XBLOCK": 64, "R0_BLOCK": 64}, 8, 1)
    timed = local_search(space, start, resized, key, first=0)
    assert min(s for s, _ in timed) == 1.0


def test_max_autotune_takes_autotune_only_where_the_target_can_time():
    gxu = GXUHeuristics()
    can_time = gxusim.target.active().can_time
    assert isinstance(max_autotune_policy(gxu), AutotuneHeuristics) == can_time
    seed = gxusim.compiler.SeedHeuristics()
    assert max_autotune_policy(seed) is seed  # a policy the user chose stays


def test_max_autotune_compiles_and_matches_eager():
    x = torch.randn(5000, 37)
    got = torch.compile(lambda t: t.softmax(-1) * 3, mode="max-autotune")(x.to("gxu"))
    torch.testing.assert_close(got.cpu(), x.softmax(-1) * 3)


def _column_question(contiguous_along_rows: bool, rules: LaunchConfig,
                     candidates: tuple = (), xnumel: int = 6144,
                     predict=lambda c: 1.0 / (c.num_stages or 1)) -> KernelQuestion:
    """A column sum whose second load moves along the reduced axis with a unit stride or
    without one (a layout permuted against the tile); the model (by default) predicts
    pipelined configs faster."""
    spec = gxusim.load_spec("gxu-on-h200")
    loads = (Access("in_ptr0", "float32", 4, True, False, False, True),
             Access("in_ptr1", "float32", 4, contiguous_along_rows, False, False, True))
    store = Access("out_ptr0", "float32", 4, True, True, False, False)
    traits = KernelTraits(loads, (store,), ("sum",), chunk_loops=1, flops=2, live_values=3)
    return KernelQuestion("k", "column_reduction", traits, {"xnumel": xnumel, "r0_numel": 784},
                          torch.float32, spec, lambda: list(candidates), predict, lambda: rules)


def test_a_chunk_loop_whose_loads_are_scattered_along_the_reduced_axis_is_not_pipelined():
    rules = LaunchConfig({"XBLOCK": 64, "R0_BLOCK": 64}, 8, 4)
    gxu = GXUHeuristics()
    assert gxu.choose_reduction(_column_question(True, rules)) is None  # the rules stand
    assert gxu.choose_reduction(_column_question(False, rules)) == \
        dataclasses.replace(rules, num_stages=1)


def test_the_register_fallback_keeps_a_scattered_kernel_unpipelined():
    """The rules' tile spills; among the configs that fit, the model's fastest pipelined
    ones are passed over for the fastest unpipelined one."""
    wide = LaunchConfig({"XBLOCK": 128, "R0_BLOCK": 512}, 4, 4)
    fitting = [LaunchConfig({"XBLOCK": 32, "R0_BLOCK": 64}, 8, stages) for stages in (4, 3, 1)]
    chosen = GXUHeuristics().choose_reduction(_column_question(False, wide, tuple(fitting)))
    assert chosen == fitting[-1]
    contiguous = GXUHeuristics().choose_reduction(_column_question(True, wide, tuple(fitting)))
    assert contiguous == fitting[0]


def test_a_chunk_loop_of_several_loads_pipelines_only_where_a_full_pipeline_fits():
    """The rules size a pipelined chunk for one load. A row sum of one load keeps its four
    stages; with three loads along the rows, three chunks in flight (3 x 128 x 64 x 12
    bytes = 288 KB) overflow the 227 KB an H200 program has, and the rules' tile is taken
    unpipelined rather than at the shallower depth that would fit."""
    spec = gxusim.load_spec("gxu-on-h200")
    rules = LaunchConfig({"XBLOCK": 128, "R0_BLOCK": 64}, 16, 4)

    def question(loads: int) -> KernelQuestion:
        row = Access("in_ptr0", "float32", 4, True, False, False, True)
        traits = KernelTraits(tuple(dataclasses.replace(row, buffer=f"in_ptr{i}")
                                    for i in range(loads)),
                              (Access("out_ptr0", "float32", 4, True, True, False, False),),
                              ("sum",), chunk_loops=1, flops=loads, live_values=3)
        return KernelQuestion("k", "looped_reduction", traits,
                              {"xnumel": 7680, "r0_numel": 1568}, torch.float32, spec,
                              lambda: [rules], lambda c: 1.0, lambda: rules)
    gxu = GXUHeuristics(spec)
    assert (gxu.CHUNK_STAGES - 1) * 128 * 64 * 4 <= spec.program_smem < \
        (gxu.CHUNK_STAGES - 1) * 128 * 64 * 12
    assert gxu.choose_reduction(question(1)) is None  # the rules stand
    assert gxu.choose_reduction(question(3)) == dataclasses.replace(rules, num_stages=1)


def test_the_register_fallback_keeps_a_row_reductions_pipelining_as_the_rules_decide():
    """The rules' tile spills. Among the configs that fit, the model (here) predicts a
    pipelined one fastest: a column reduction takes it, while a row reduction, whose rules
    decided not to pipeline, takes the model's fastest unpipelined config."""
    spec = gxusim.load_spec("gxu-on-h200")
    spilling = LaunchConfig({"XBLOCK": 128, "R0_BLOCK": 512}, 4, 1)
    fitting = [LaunchConfig({"XBLOCK": 32, "R0_BLOCK": 64}, 8, stages) for stages in (4, 1)]

    def question(kind: str) -> KernelQuestion:
        row = Access("in_ptr0", "float32", 4, True, False, False, True)
        traits = KernelTraits((row,), (Access("out_ptr0", "float32", 4, True, True, False, False),),
                              ("sum",), chunk_loops=1, flops=2, live_values=3)
        return KernelQuestion("k", kind, traits, {"xnumel": 4096, "r0_numel": 4096},
                              torch.float32, spec, lambda: list(fitting),
                              lambda c: 1.0 / (c.num_stages or 1), lambda: spilling)
    gxu = GXUHeuristics(spec)
    assert gxu.registers_per_thread(question("looped_reduction").traits, spilling, spec) > \
        gxu.SURE_SPILL * spec.register_budget(spilling.num_warps)
    assert gxu.choose_reduction(question("column_reduction")) == fitting[0]
    assert gxu.choose_reduction(question("looped_reduction")) == fitting[1]


def test_one_pass_rows_pipeline_only_over_enough_chunks_and_few_rows_keep_their_tile():
    gxu = GXUHeuristics(gxusim.load_spec("gxu-on-h200"))
    short = gxu.select_one_pass_reduction(4608, 196, torch.float32)
    long = gxu.select_one_pass_reduction(4608, 4096, torch.float32)
    assert -(-196 // short.rblock) < 2 * gxu.CHUNK_STAGES and short.num_stages == 1
    assert -(-4096 // long.rblock) >= 2 * gxu.CHUNK_STAGES and long.num_stages == gxu.CHUNK_STAGES
    few = gxu.select_reduction(80, 6272, torch.float32)  # 80 rows on 32 programs
    many = gxu.select_reduction(8192, 6272, torch.float32)
    assert few.xblock * few.rblock == many.xblock * many.rblock == gxu.MULTI_PASS_TILE
    assert few.rblock > many.rblock


def test_tiles_that_leave_programs_idle_in_the_last_round_let_the_model_weigh_smaller_ones():
    """4608 columns in 128-column tiles are 36 tiles: a second round in which 28 of the 32
    programs idle. The model (here: each round costs its tile's columns plus a fixed 32)
    then weighs the legal halvings of the tile; a full last round keeps the rules' tile."""
    rules = LaunchConfig({"XBLOCK": 128, "R0_BLOCK": 128}, 8, 1)
    halved, quartered = (dataclasses.replace(rules, blocks={**rules.blocks, "XBLOCK": x})
                         for x in (64, 32))

    def rounds_model(xnumel):
        def seconds(config):
            tiles = math.ceil(xnumel / config.blocks["XBLOCK"])
            return math.ceil(tiles / 32) * (config.blocks["XBLOCK"] + 32)
        return seconds
    legal = (rules, halved, quartered)
    gxu = GXUHeuristics()
    # 128: 2 rounds x 160; 64: 3 x 96 (the least); 32: 5 x 64
    assert gxu.choose_reduction(_column_question(True, rules, legal, 4608, rounds_model(4608))) \
        == halved
    # 4096 columns: 32 tiles, one full round
    assert gxu.choose_reduction(_column_question(True, rules, legal, 4096, rounds_model(4096))) \
        is None
    # halvings that are not legal configs are not taken
    assert gxu.choose_reduction(_column_question(True, rules, (rules,), 4608,
                                                 rounds_model(4608))) is None


def _pool_question(dtype: torch.dtype, loads: int, spec_name: str = "gxu-on-h200"
                   ) -> KernelQuestion:
    """A 2D tile (a max pool's window written channels-last) whose `loads` loads each stream
    one element of `dtype` per output; the rules ask for a 128 x 128 tile on 16 warps."""
    name = str(dtype).removeprefix("torch.")
    reads = tuple(Access("in_ptr0", name, dtype.itemsize, False, False, False, False)
                  for _ in range(loads))
    write = Access("out_ptr0", name, dtype.itemsize, True, False, False, False)
    traits = KernelTraits(reads, (write,), flops=6 * loads, live_values=loads)
    rules = LaunchConfig({"XBLOCK": 128, "YBLOCK": 128}, 16)
    return KernelQuestion("pool", "pointwise_2d", traits, {"xnumel": 3136, "ynumel": 2048},
                          dtype, gxusim.load_spec(spec_name), lambda: [rules],
                          lambda c: 1.0, lambda: rules)


def test_a_2d_tile_of_many_loads_shrinks_along_y_until_its_loads_fit_the_l1():
    gxu = GXUHeuristics()
    assert gxu.choose_tile_2d(_pool_question(torch.float32, 1)) is None  # 64 KB: the rules
    for dtype in (torch.float32, torch.bfloat16):
        question = _pool_question(dtype, 9)
        chosen = gxu.choose_tile_2d(question)
        x, y = chosen.blocks["XBLOCK"], chosen.blocks["YBLOCK"]
        streamed = x * y * question.traits.streamed_load_bytes
        # within the share of the L1, and the largest such tile: YBLOCK halved, XBLOCK kept
        assert streamed <= gxu.TILE_2D_L1_SHARE * question.spec.l1_bytes < 2 * streamed
        assert (x, chosen.num_warps) == (128, 16)
    # bf16 streams half the bytes: twice the tile
    assert gxu.choose_tile_2d(_pool_question(torch.bfloat16, 9)).blocks["YBLOCK"] == \
        2 * gxu.choose_tile_2d(_pool_question(torch.float32, 9)).blocks["YBLOCK"]
    # two programs an SM share its L1 (16 SMs, 32 programs): half the tile again
    partition = gxu.choose_tile_2d(_pool_question(torch.bfloat16, 9, "gxu-partition-on-h200"))
    assert partition.blocks["YBLOCK"] == gxu.choose_tile_2d(
        _pool_question(torch.float32, 9)).blocks["YBLOCK"]
    # a spec that does not model an L1 keeps the rules' tile
    unmodelled = _pool_question(torch.float32, 9, "gxu")
    kept = gxu.choose_tile_2d(unmodelled)
    assert kept is None or kept.blocks == unmodelled.rules().blocks
