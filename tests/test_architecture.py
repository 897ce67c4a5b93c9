"""The pipeline's seams: one target object, planning by policy, one prediction path, bounded
launch records, the caller's state left as it was."""
import dataclasses
import json
import sys
import types

import pytest
import torch

import gxusim
from gxusim import environment
from gxusim import target as targets
from gxusim.compiler import launcher
from gxusim.compiler.autotune import plan_key
from gxusim.compiler.plan import (KernelShape, PlanTimer, PolicyError, candidate_plans,
                                  plan_launch)
from gxusim.compiler.policies import resolve_policy


def test_device_and_inductor_interface_ask_the_same_target_object():
    from gxusim.compiler.inductor_registration import GXUDeviceInterface, device_properties
    active = targets.active()
    assert torch.gxu.get_device_capability() == GXUDeviceInterface.get_compute_capability_tuple() \
        == active.capability()
    assert device_properties().total_memory == active.total_memory()
    assert gxusim.current_target() == active.name


def test_compiled_looped_reduction_predicts_the_same_time_as_emulate():
    """On the emulator target the launch record's prediction is emulate()'s, to the bit; on
    the cuda target it comes from the plan, whose facts must be what the emulator counts."""
    on_emulator = gxusim.current_target() == targets.EmulatorTarget.name
    x = torch.randn(96, 3000, device="gxu")
    gxusim.clear_launches()
    with launcher.capture() as captured:
        got = torch.compile(lambda t: t.sum(1) * 2)(x)
    torch.testing.assert_close(got.cpu(), x.cpu().sum(1) * 2, rtol=1e-4, atol=1e-3)
    records = {r.kernel: r for r in gxusim.launches()}
    assert captured, "no gxu kernel launched"
    looped = [c for c in captured if "R0_BLOCK" in c.plan.meta]
    assert looped, "expected a looped reduction (R0_BLOCK a launch parameter)"
    for launch in captured:
        args = launch.args if on_emulator else \
            [a.cpu() if isinstance(a, torch.Tensor) else a for a in launch.args]
        report = gxusim.emulate(launch.kernel.fn, launch.plan.grid, *args,
                                num_warps=launch.plan.num_warps,
                                **launch.plan.kernel_meta(launch.kernel.shape))
        if on_emulator:
            assert report.predicted_s == records[launch.kernel.name].predicted_s
        numels = launch.kernel.numels(launch.args)
        # What the plan alone says (the cuda target's prediction) is what the emulator counted,
        # the chunk loop's pipelining depth included.
        planned = launch.plan.facts(launch.kernel.shape, numels,
                                    launch.kernel.shape.argument_bytes(launch.args),
                                    gxusim.current_spec())
        assert report.facts.tile_elements == planned.tile_elements
        assert report.facts.tiles_per_program == launch.plan.tiles_per_program
        assert report.facts.phases == planned.phases
        # the distinct bytes the L2 could keep (the emulator's traffic counts every request)
        assert report.facts.footprint_bytes == planned.footprint_bytes > 0


def test_a_policy_that_measures_gets_a_timer_or_says_what_it_needs():
    shape = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
    spec = gxusim.load_spec("gxu")
    autotune = resolve_policy("autotune")
    timed = []

    def seconds(plan):
        return 1.0 / (plan.meta["XBLOCK"] * plan.num_warps)  # bigger is faster, by fiat

    built = []  # the batches handed to compile_ahead

    def time_plan(plan):
        # a plan is built before its timing, in a batch with the others of its round
        assert any(plan_key(plan) in map(plan_key, batch) for batch in built)
        timed.append(plan)
        return seconds(plan)

    numels = {"xnumel": 1 << 20}
    plan = plan_launch(shape, numels, torch.float32, autotune, spec,
                       PlanTimer(time_plan, built.append), key=f"test-{id(timed)}",
                       bytes_moved=8 << 20)
    assert len(built[0]) > 1 and sum(map(len, built)) == len({plan_key(p) for p in timed})
    # the fastest timed is kept: on this landscape the fastest legal config, found without
    # timing them all
    legal = candidate_plans(shape, numels, spec)
    assert seconds(plan) == min(seconds(p) for p in timed) == min(seconds(p) for p in legal)
    assert len(timed) < len(legal)
    with pytest.raises(RuntimeError, match="needs a target that can"):
        plan_launch(shape, {"xnumel": 12345}, torch.float32, autotune, spec, None, key="untimed")


def test_a_search_passes_over_configs_the_gpu_cannot_load(tmp_path, monkeypatch):
    """A config whose binary takes more shared memory than the GPU has raises
    OutOfResources when it is loaded: the search times it as never finishing and keeps the
    fastest config that runs, instead of failing the compile."""
    from triton.runtime.errors import OutOfResources
    monkeypatch.setenv("GXUSIM_CACHE_DIR", str(tmp_path))
    shape = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
    spec, numels = gxusim.load_spec("gxu"), {"xnumel": 1 << 20}
    widest = max(p.meta["XBLOCK"] for p in candidate_plans(shape, numels, spec))

    def time_plan(plan):
        if plan.meta["XBLOCK"] == widest:  # the fastest, by fiat, but it cannot be loaded
            raise OutOfResources(300000, 232448, "shared memory")
        return 1.0 / (plan.meta["XBLOCK"] * plan.num_warps)
    plan = plan_launch(shape, numels, torch.float32, resolve_policy("autotune"), spec,
                       PlanTimer(time_plan), key="unloadable", bytes_moved=8 << 20)
    assert plan.meta["XBLOCK"] == widest // 2


def test_a_search_whose_climbs_cannot_load_walks_on_and_caches_no_failure(tmp_path,
                                                                        monkeypatch):
    """Where every config the climbs reach fails to load (all but the narrowest tiles need
    more shared memory than the GPU has), the search walks the model's order to one that
    loads; where none loads, it says so in one line and writes nothing to its cache."""
    from triton.runtime.errors import OutOfResources
    monkeypatch.setenv("GXUSIM_CACHE_DIR", str(tmp_path))
    shape = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
    spec, numels = gxusim.load_spec("gxu"), {"xnumel": 1 << 20}
    narrowest = min(p.meta["XBLOCK"] for p in candidate_plans(shape, numels, spec))

    def only_narrowest(plan):
        if plan.meta["XBLOCK"] != narrowest:
            raise OutOfResources(300000, 232448, "shared memory")
        return 1.0 / plan.num_warps
    plan = plan_launch(shape, numels, torch.float32, resolve_policy("autotune"), spec,
                       PlanTimer(only_narrowest), key="narrow only", bytes_moved=8 << 20)
    assert plan.meta["XBLOCK"] == narrowest

    def never(plan):
        raise OutOfResources(300000, 232448, "shared memory")
    with pytest.raises(RuntimeError, match="none of the .* legal configs of unloadable"):
        plan_launch(shape, numels, torch.float32, resolve_policy("autotune"), spec,
                    PlanTimer(never), key="unloadable", bytes_moved=8 << 20)
    cached = [json.loads(f.read_text()) for f in (tmp_path / "autotune").glob("*.json")]
    assert [entry["key"] for entry in cached] == ["narrow only"]


def test_autotune_cache_is_used_and_a_corrupted_file_is_timed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GXUSIM_CACHE_DIR", str(tmp_path))
    shape = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
    spec, autotune, timed = gxusim.load_spec("gxu"), resolve_policy("autotune"), []

    def plan(size):
        return plan_launch(shape, {"xnumel": size}, torch.float32, autotune, spec,
                           PlanTimer(lambda p: timed.append(p) or 1.0 / p.meta["XBLOCK"]),
                           key=f"k{size}")

    first = plan(1 << 20)
    (cache_file,) = (tmp_path / "autotune").glob("*.json")
    calls = len(timed)
    assert plan(1 << 20) == dataclasses.replace(first, rules=plan(1 << 20).rules)
    assert len(timed) == calls, "a cached size was timed again"
    cache_file.write_text("{not json")
    assert plan(1 << 20).meta == first.meta and len(timed) == 2 * calls
    assert "plan" in json.loads(cache_file.read_text())
    plan(1 << 16)
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 2


def test_vendor_policy_by_import_path_and_errors_name_it(monkeypatch):
    module = types.ModuleType("vendor_policy")

    class Wide(gxusim.compiler.GXUHeuristics):
        name = "wide"

    module.Wide = Wide
    module.NotAPolicy = int
    monkeypatch.setitem(sys.modules, "vendor_policy", module)
    assert isinstance(resolve_policy("vendor_policy:Wide"), Wide)
    with pytest.raises(TypeError, match="not a gxusim.Heuristics subclass"):
        resolve_policy("vendor_policy:NotAPolicy")
    with pytest.raises(ValueError, match="cannot import 'Missing'"):
        resolve_policy("vendor_policy:Missing")
    with pytest.raises(ValueError, match="unknown heuristics policy 'nope'"):
        resolve_policy("nope")


def test_a_policy_that_raises_is_reported_as_the_policys_error():
    class Broken(gxusim.Heuristics):
        name = "broken"

        def select_xblock(self, numel, dtype):
            raise ZeroDivisionError("oops")

    shape = KernelShape("k", ("in_ptr0", "out_ptr0", "xnumel"), ("XBLOCK",), {})
    with pytest.raises(PolicyError, match="policy 'broken': select_xblock.*ZeroDivisionError"):
        plan_launch(shape, {"xnumel": 10}, torch.float32, Broken(), gxusim.load_spec("gxu"))


def test_launch_history_is_a_ring_of_the_latest_records():
    from gxusim import launch as records
    saved = records.launches()
    try:
        gxusim.set_launch_history(3)
        gxusim.clear_launches()
        for i in range(5):
            records.record(records.Launch(f"k{i}", (1, 1, 1), 1, {}, "emulator", "gxu"))
        assert [r.kernel for r in gxusim.launches()] == ["k2", "k3", "k4"]
        with pytest.raises(ValueError, match="non-negative"):
            gxusim.set_launch_history(-1)
    finally:
        gxusim.set_launch_history(environment.integer("GXUSIM_LAUNCH_HISTORY"))
        records.restore(saved)


def test_sweep_restores_the_callers_policy_and_launch_records():
    from gxusim import sweep
    gxusim.use_heuristics("seed")
    x = torch.randn(1000, device="gxu")
    gxusim.clear_launches()
    torch.compile(lambda t: t * 3)(x)
    mine = gxusim.launches()
    try:
        sweep.sweep(["add_relu"], ["gxu"])
        assert gxusim.compiler.current_heuristics().name == "seed"
        assert gxusim.launches() == mine
    finally:
        gxusim.use_heuristics("gxu")


def test_emulation_error_is_public():
    assert issubclass(gxusim.EmulationError, RuntimeError)
