"""The gxu device does what torch.cuda does, through torch's generic device APIs.

Each test is a behaviour a program written for CUDA relies on: device indices checked,
storages made by torch itself, streams and events with real ids and times, the allocator's
statistics, generators, pinned memory, serialisation, shallow copies, recurrent layers and
the profiler. They run on the session's target (the emulator here, CUDA on a GPU machine).
"""
import copy
import io
import json
import os
import subprocess
import sys
import time

import pytest
import torch

import gxusim

OUT_OF_RANGE = "The device index is out of range"


# -- device indices -------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: torch.zeros(2, device="gxu:7"),
    lambda: torch.ones(2).to("gxu:7"),
    lambda: torch.ones(2).gxu(1),
    lambda: torch.Stream(device="gxu:1"),
    lambda: torch.accelerator.set_device_index(2),
    lambda: torch.gxu.set_device(1),
    lambda: torch.Generator(device="gxu:3"),
], ids=["factory", "to", "method", "stream", "accelerator", "set_device", "generator"])
def test_a_device_index_gxu_lacks_is_an_error(make):
    with pytest.raises(RuntimeError, match=OUT_OF_RANGE):
        make()


def test_loading_onto_a_missing_device_is_refused_and_onto_gxu0_works():
    saved = io.BytesIO()
    torch.save(torch.arange(4.0, device="gxu"), saved)
    saved.seek(0)
    with pytest.raises(RuntimeError, match="device_count"):
        torch.load(saved, map_location="gxu:1")
    saved.seek(0)
    loaded = torch.load(saved, map_location="gxu:0")
    assert loaded.device == torch.device("gxu", 0) and loaded.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_accelerator_api_names_gxu():
    assert torch.accelerator.current_accelerator().type == "gxu"
    assert torch.accelerator.device_count() == torch.gxu.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.float32 in torch.accelerator.get_device_capability()["supported_dtypes"]
    torch.accelerator.synchronize()


# -- storages torch makes itself --------------------------------------------------------------

def test_storages_torch_allocates_are_gxu_memory():
    storage = torch.UntypedStorage(16, device="gxu")
    assert storage.device == torch.device("gxu", 0) and storage.nbytes() == 16
    source = torch.arange(6.0, device="gxu")
    clone = source.untyped_storage().clone()
    assert clone.device.type == "gxu" and clone.data_ptr() != source.data_ptr()
    assert torch.empty(0, device="gxu").set_(clone).tolist() == source.tolist()


def test_deepcopy_of_a_module_with_buffers():
    norm = torch.nn.BatchNorm1d(4).to("gxu")
    norm(torch.randn(8, 4, device="gxu"))  # running statistics are no longer the defaults
    copied = copy.deepcopy(norm)
    assert copied.running_mean.device.type == "gxu"
    assert copied.running_mean.data_ptr() != norm.running_mean.data_ptr()
    torch.testing.assert_close(copied.running_mean.cpu(), norm.running_mean.cpu())


def test_a_storage_resized_keeps_what_fits():
    storage = torch.arange(4.0, device="gxu").untyped_storage()
    storage.resize_(32)
    assert storage.nbytes() == 32
    assert torch.empty(0, device="gxu").set_(storage, 0, (4,), (1,)).tolist() == [0, 1, 2, 3]


def test_tensor_metadata_flags_travel_with_save_and_load():
    tensor = torch.empty(3, 3, device="gxu")
    assert torch._utils.get_tensor_metadata(tensor) == {}
    torch._utils.set_tensor_metadata(tensor, {"format_number": True})
    assert torch._utils.get_tensor_metadata(tensor) == {"format_number": True}
    saved = io.BytesIO()
    torch.save(tensor, saved)
    saved.seek(0)
    loaded = torch.load(saved)
    assert loaded.device.type == "gxu"
    assert torch._utils.get_tensor_metadata(loaded) == {"format_number": True}


def test_shallow_copies_between_gxu_and_cpu():
    cpu, gxu = torch.randn(4, 4), torch.randn(4, 4, device="gxu")
    assert torch._has_compatible_shallow_copy_type(cpu, gxu)
    cpu.data = gxu
    assert cpu.device.type == "gxu" and cpu.data_ptr() == gxu.data_ptr()
    other = torch.randn(4, 4, device="gxu")
    plain = torch.randn(4, 4)
    other.data = plain
    assert other.device.type == "cpu" and other.data_ptr() == plain.data_ptr()


def test_set_makes_one_tensor_alias_another():
    x = torch.randn(6, device="gxu")
    y = torch.empty(0, device="gxu")
    y.set_(x)
    x.fill_(2.0)
    assert y.data_ptr() == x.data_ptr() and y.tolist() == [2.0] * 6
    assert torch.randn(3, device="gxu").set_().untyped_storage().device.type == "gxu"


# -- streams and events ---------------------------------------------------------------------

def test_streams_have_their_own_ids_and_become_current():
    first, second = torch.Stream(device="gxu"), torch.Stream(device="gxu")
    assert first.stream_id != second.stream_id
    assert first.device == torch.device("gxu", 0)
    before = torch.accelerator.current_stream()
    with first:
        assert torch.accelerator.current_stream() == first == torch.gxu.current_stream()
    assert torch.accelerator.current_stream() == before
    with torch.gxu.stream(second):
        assert torch.gxu.current_stream() == second
    assert first.query() and second.query()  # nothing queued on either
    first.synchronize()
    second.wait_stream(first)
    if gxusim.current_target() == "cuda":  # gxu work is queued on the CUDA stream of that id
        with first:
            assert torch.cuda.current_stream().stream_id == first.stream_id


def test_events_record_time_on_a_stream():
    stream = torch.Stream(device="gxu")
    start, end = (torch.Event(device="gxu", enable_timing=True) for _ in range(2))
    start.record(stream)
    time.sleep(0.02)
    end.record(stream)
    end.synchronize()
    assert start.event_id != end.event_id and end.query()
    assert 15.0 <= start.elapsed_time(end) < 2000.0
    waiting = torch.Stream(device="gxu")
    waiting.wait_event(end)
    assert stream.record_event().device.type == "gxu"
    untimed = torch.gxu.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing"):
        untimed.elapsed_time(end)


# -- memory ---------------------------------------------------------------------------------

def test_allocator_statistics_follow_allocations():
    torch.accelerator.reset_peak_memory_stats()
    before = torch.accelerator.memory_allocated()
    x = torch.empty(1 << 18, device="gxu")
    assert torch.accelerator.memory_allocated() == before + x.nbytes == torch.gxu.memory_allocated()
    assert torch.accelerator.max_memory_allocated() >= before + x.nbytes
    stats = torch.gxu.memory_stats()
    assert stats["allocation.all.current"] >= 1
    assert stats["allocated_bytes.all.allocated"] >= x.nbytes
    del x
    assert torch.accelerator.memory_allocated() == before
    assert torch.gxu.max_memory_reserved() >= torch.gxu.memory_reserved() >= before
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    assert "Allocated memory" in torch.gxu.memory_summary()
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.gxu.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_pinned_host_memory():
    plain = torch.randn(10)
    assert not plain.is_pinned()
    pinned = plain.pin_memory()
    assert pinned.is_pinned() and pinned[2:5].is_pinned()
    assert pinned.to("gxu", non_blocking=True).cpu().tolist() == plain.tolist()
    storage = torch.randn(10).untyped_storage().pin_memory("gxu")
    assert storage.is_pinned("gxu")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)),
                                         batch_size=4, pin_memory=True)
    assert all(batch.is_pinned() for (batch,) in loader)


# -- random numbers -------------------------------------------------------------------------

def test_gxu_generators_are_reproducible_and_independent():
    first, second = torch.Generator(device="gxu"), torch.Generator(device="gxu")
    assert first.device == torch.device("gxu", 0)
    first.manual_seed(5)
    second.manual_seed(5)
    a = torch.randn(8, device="gxu", generator=first)
    torch.randn(8, device="gxu")  # the default generator moves; the others do not
    b = torch.randn(8, device="gxu", generator=second)
    assert a.tolist() == b.tolist()
    state = first.get_state()
    c = torch.rand(4, device="gxu", generator=first)
    first.set_state(state)
    assert torch.rand(4, device="gxu", generator=first).tolist() == c.tolist()


def test_default_generator_seeding_and_states():
    torch.gxu.manual_seed_all(11)
    assert torch.gxu.initial_seed() == 11
    states = torch.gxu.get_rng_state_all()
    first = torch.randn(5, device="gxu")
    torch.gxu.set_rng_state_all(states)
    assert torch.randn(5, device="gxu").tolist() == first.tolist()
    with torch.random.fork_rng(device_type="gxu"):
        torch.gxu.seed_all()
        assert torch.gxu.initial_seed() != 11
    assert torch.gxu.initial_seed() == 11
    assert torch.gxu.default_generators[0].initial_seed() == 11


# -- properties and initialisation ----------------------------------------------------------

def test_properties_carry_cudas_fields_beside_the_spec():
    spec = gxusim.current_spec()
    props = torch.gxu.get_device_properties()
    assert (props.major, props.minor) == torch.gxu.get_device_capability()
    assert props.total_memory > 0 and props.multi_processor_count == spec.sm_count
    assert props.warp_size == spec.warp_size and props.max_grid == spec.max_grid
    assert props.name == spec.name == torch.gxu.get_device_name()
    torch.gxu.init()
    assert torch.gxu.is_initialized() and not torch.gxu._is_in_bad_fork()


# -- recurrent layers -----------------------------------------------------------------------

@pytest.mark.parametrize("layer", [
    lambda: torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True),
    lambda: torch.nn.GRU(6, 8, num_layers=2),
], ids=["lstm", "gru"])
def test_recurrent_layers_match_the_cpu_forward_and_backward(layer):
    torch.manual_seed(0)
    model = layer()
    x = torch.randn(5, 3, 6, requires_grad=True)
    out = model(x)[0]
    out.square().sum().backward()
    expected_grads = [x.grad] + [p.grad for p in model.parameters()]
    gxu_model = copy.deepcopy(model).to("gxu")
    gxu_model.zero_grad()
    gx = x.detach().to("gxu").requires_grad_()
    gxu_out = gxu_model(gx)[0]
    gxu_out.square().sum().backward()
    torch.testing.assert_close(gxu_out.cpu(), out, rtol=1e-4, atol=1e-5)
    for expected, got in zip(expected_grads, [gx.grad] + [p.grad for p in gxu_model.parameters()]):
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


# -- profiler -------------------------------------------------------------------------------

def test_the_profiler_traces_eager_ops_and_every_gxu_kernel_with_its_launch(tmp_path):
    from torch.profiler import ProfilerActivity, profile
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()).to("gxu")
    fn = torch.compile(lambda t: (t * 2).relu() + 1)
    x = torch.randn(50_000, device="gxu")
    fn(x)
    gxusim.clear_launches()
    on_cuda = gxusim.current_target() == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1] + \
        ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        model(torch.randn(4, 32, device="gxu"))
        fn(x)
    (launch,) = [launch for launch in gxusim.launches() if launch.policy != "extern"]
    assert all(event.cpu_time_total >= 0 for event in prof.key_averages())
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(event["name"] == "aten::addmm" for event in events)
    named = [event for event in events if event["name"] == launch.kernel]
    (kernel,) = [event for event in named if "policy" in event.get("args", {})]
    args = kernel["args"]
    assert args["grid"] == str(launch.grid) and args["num_warps"] == launch.num_warps
    assert args["tiles_per_program"] == launch.meta["tiles_per_program"]
    assert args["policy"] == launch.policy and args["target"] == gxusim.current_target()
    assert args["predicted_us"] > 0
    if on_cuda:  # the GPU's own record of the kernel that launch ran, under the same name
        assert any(event.get("cat") == "kernel" for event in named), named


def test_a_dynamo_backend_named_after_the_device():
    assert "gxu" in torch._dynamo.list_backends()
    x = torch.randn(1000, device="gxu")
    gxusim.clear_launches()
    torch._dynamo.reset()
    got = torch.compile(lambda t: (t * 3).relu(), backend="gxu")(x)
    assert torch.equal(got.cpu(), (x.cpu() * 3).relu())
    assert [launch.kernel for launch in gxusim.launches()] == ["triton_poi_fused_mul_relu_0"]


SPAWNS = """
import multiprocessing
import torch  # and nothing of gxusim: only torch's autoloading can bring gxu in


def child(queue):
    queue.put(torch.ones(3, device="gxu").sum().item())


if __name__ == "__main__":
    print(hasattr(torch, "gxu"), flush=True)
    if hasattr(torch, "gxu"):
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        process.join()
        print(queue.get(timeout=10))
"""


def test_autoload_registers_gxu_with_torch_in_spawned_processes_when_asked(tmp_path):
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS)
    for setting, expected in (("1", ["True", "3.0"]), ("0", ["False"])):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "GXUSIM_AUTOLOAD": setting})
        assert done.stdout.split() == expected, done.stderr[-2000:]


def test_compiling_under_a_gxu_device_context():
    """Factories inside gxusim and Inductor (host views, coverage checks) say their device:
    under `with torch.device("gxu")` an unplaced `torch.empty` would be a gxu tensor."""
    torch._dynamo.reset()
    with torch.device("gxu"):
        x = torch.randn(1000)
        model = torch.nn.Linear(8, 4)
        got = torch.compile(lambda t: (t * 2).relu())(x)
        out = torch.compile(model)(torch.randn(3, 8))
    assert got.device.type == out.device.type == "gxu"
    torch.testing.assert_close(got.cpu(), (x.cpu() * 2).relu())
