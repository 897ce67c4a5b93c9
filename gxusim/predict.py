"""Predict-only runs: a model's GXU kernels planned and timed by the performance model at
any size, with nothing executed and no tensor memory allocated.

The model's parameters and inputs are FakeTensors on gxu (shapes, strides and dtypes, no
storage). Dynamo, AOTAutograd and Inductor compile them exactly as they compile real
tensors, and the compiled graph then runs under the same FakeTensorMode: every buffer it
allocates is fake, extern kernels (matmuls) only compute shapes, and each GXU kernel launch
is planned by the active policy, checked against the active spec and recorded with the
performance model's prediction (`compiler.launcher.predict_only`), but not executed. So a
sweep over sizes up to 2^30 elements costs compile time only, on any laptop.
"""
from __future__ import annotations

import warnings

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from typing import Sequence

from . import launch as launch_records
from .compiler import Heuristics, current_heuristics, use_heuristics
from .compiler.inductor_registration import kernels_loaded_in_this_process
from .compiler.launcher import predict_only
from .compiler.policies import resolve_policy
from .compiler.plan import PolicyError
from .launch import Launch
from .models import Case, Scale, step_mode


def _fake_model(case: Case, dtype: torch.dtype) -> torch.nn.Module:
    """The case's model with FakeTensor parameters on gxu, in `dtype`."""
    model = case.make_model()
    for module in model.modules():
        for name, parameter in module._parameters.items():
            if parameter is not None and parameter.is_floating_point() and parameter.dtype != dtype:
                module._parameters[name] = torch.nn.Parameter(parameter.detach().to(dtype),
                                                              parameter.requires_grad)
    return model


def predict_case(case: Case, scale: Scale, policies: Sequence[str | Heuristics],
                 dtype: torch.dtype = torch.float32, train: bool = False
                 ) -> list[list[Launch] | Exception]:
    """For each policy, the launch records of one forward (or training step) of `case` at
    `scale`, predicted on the active spec without running anything (target "predict"), or
    the error that policy met. The graph is compiled once: policies plan at launch time."""
    torch._dynamo.reset()  # each size is its own static-shape graph, never a recompile limit
    # Before FakeTensorMode: a vendor's policy module is imported (and runs) with real tensors.
    resolved = [resolve_policy(policy) for policy in policies]
    caller_policy, caller_launches = current_heuristics(), launch_records.launches()
    results: list[list[Launch] | Exception] = []
    try:
        with FakeTensorMode(allow_non_fake_inputs=False), torch.device("gxu"), \
                warnings.catch_warnings(), predict_only(), kernels_loaded_in_this_process(), \
                step_mode(train):
            # Autograd peeks at fake storages' data pointers: harmless here, and noisy.
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            model = _fake_model(case, dtype)
            inputs = [torch.empty(shape, dtype=torch.int64 if case.vocabulary else dtype)
                      for shape in case.shapes(scale)]
            compiled = torch.compile(model, dynamic=False)
            for policy in resolved:
                launch_records.clear_launches()
                try:
                    use_heuristics(policy)
                    output = compiled(*inputs)
                    if train:
                        output.float().square().mean().backward()
                    results.append(launch_records.launches())
                except PolicyError as error:  # this policy's fault: the others still plan
                    results.append(error)
        return results
    finally:
        torch._dynamo.reset()
        use_heuristics(caller_policy)
        launch_records.restore(caller_launches)
