"""Test session setup: one execution target per pytest process, and the `cuda` marker.

The gxusim target is fixed by the first gxu allocation, so it cannot change between tests
of one process. Design: the session's target is `GXUSIM_TARGET` if set, else "auto" (cuda
with a GPU, the emulator without), and it is resolved here, before any test allocates.
So `python -m pytest tests` runs everything on a GPU machine (cuda target) and everything
but the `cuda` tests elsewhere; tests that need the other target start a subprocess with
`GXUSIM_TARGET` set. `cuda`-marked tests are skipped when torch sees no GPU, or when the
session was forced onto the emulator (`GXUSIM_TARGET=emulator`).

Every test leaves torch's and gxusim's global settings as it found them (`_settings_kept`):
a test that changes the compiler's configs, the policy or the spec without a context that
restores them fails, naming what it left changed; the random generators a test reseeds are
given back their state.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

import pytest
import torch

os.environ.setdefault("GXUSIM_TARGET", "auto")

import gxusim  # noqa: E402  (after the target variable is settled)
from gxusim.compiler.policies import current_heuristics  # noqa: E402

CONFIGS = {"torch._inductor.config": torch._inductor.config,
           "torch._dynamo.config": torch._dynamo.config,
           "torch._functorch.config": torch._functorch.config}


def _settings() -> dict[str, Any]:
    settings = {name: module.get_config_copy() for name, module in CONFIGS.items()}
    settings["gxusim policy"] = current_heuristics().name
    settings["gxusim spec"] = gxusim.current_spec()
    return settings


def _random_states() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), torch.gxu.get_rng_state_all(), cuda


def _restore_random_states(states: tuple) -> None:
    cpu, gxu, cuda = states
    torch.set_rng_state(cpu)
    torch.gxu.set_rng_state_all(gxu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


@pytest.fixture(autouse=True)
def _settings_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    before, states = _settings(), _random_states()
    yield
    _restore_random_states(states)
    after = _settings()
    changed = []
    for name, value in before.items():
        if isinstance(value, dict):
            keys = [key for key in value if after[name].get(key) != value[key]]
            if keys:
                CONFIGS[name].load_config({key: value[key] for key in keys})
            changed += [f"{name}.{key}" for key in keys]
        elif after[name] != value:
            changed.append(name)
    if changed:
        gxusim.use_heuristics(before["gxusim policy"])
        gxusim.use_spec(before["gxusim spec"])
        pytest.fail(f"{request.node.nodeid} left global settings changed: {', '.join(changed)}; "
                    f"change them inside a context that restores them (config.patch, "
                    f"gxusim.use_spec(...) as a context, try/finally)", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not torch.cuda.is_available():
        reason = "needs a CUDA GPU; torch sees none"
    elif gxusim.current_target() != "cuda":
        reason = f"session target is {gxusim.current_target()!r} (GXUSIM_TARGET); cuda tests " \
                 f"need the cuda target"
    else:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
