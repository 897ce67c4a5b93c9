"""Differential fuzz tests: random programs compiled for gxu vs eager on the CPU.

See the package docstring (tests/fuzz/__init__.py) for what is compared and how to run long.
"""
from __future__ import annotations

import collections
import json
import os
import time
import warnings

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, note, settings

import gxusim  # noqa: F401  (registers gxu)

from .programs import (failure_record, op_binary, op_index, op_reduce, op_scan, op_unary_float,
                       op_view, programs, run_program)

EXAMPLES = int(os.environ.get("GXUSIM_FUZZ_EXAMPLES", "0"))
SEED = os.environ.get("GXUSIM_FUZZ_SEED")
COLLECT = os.environ.get("GXUSIM_FUZZ_COLLECT")


OUTCOMES: collections.Counter = collections.Counter()
UNSUPPORTED: collections.Counter = collections.Counter()


def _settings(default_examples: int):
    return settings(
        max_examples=EXAMPLES or default_examples,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        # a program is a few dozen draws; compiling it takes seconds: hypothesis's health checks
        # on generation speed do not apply
        suppress_health_check=list(HealthCheck),
        # no shrinking unless asked (GXUSIM_FUZZ_SHRINK=1): every step recompiles, and a
        # shrink can take many minutes; collected failures are minimised by hand
        phases=(Phase.explicit, Phase.reuse, Phase.generate)
        + ((Phase.shrink,) if os.environ.get("GXUSIM_FUZZ_SHRINK") == "1" and not COLLECT else ()),
        print_blob=True,
    )


@pytest.fixture(autouse=True)
def _every_kernel_generated():
    with torch._inductor.config.patch(force_disable_caches=True):
        yield


@pytest.fixture(autouse=True, scope="module")
def _module_setup():
    start = time.perf_counter()
    yield
    torch._dynamo.reset()
    if OUTCOMES:
        print(f"\nfuzz outcomes: {dict(OUTCOMES)} in {time.perf_counter() - start:.0f} s")
        for reason, n in UNSUPPORTED.most_common():
            print(f"  unsupported x{n}: {reason}")


def _check(prog) -> None:
    note(prog.describe())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # var() with too few elements, etc.
        try:
            outcome, reason = run_program(prog)
        except Exception as error:
            OUTCOMES["failure"] += 1
            if COLLECT:
                print(f"[fuzz] {sum(OUTCOMES.values())}: failure", flush=True)
                with open(COLLECT, "a") as f:
                    f.write(json.dumps(failure_record(prog, error)) + "\n")
                print(f"\nFAILURE ({type(error).__name__}): {str(error)[:300]}\n{prog.describe()}")
                return
            raise
    OUTCOMES[outcome] += 1
    if COLLECT:
        print(f"[fuzz] {sum(OUTCOMES.values())}: {outcome} {reason[:120]}", flush=True)
    if outcome == "unsupported":
        UNSUPPORTED[reason] += 1
    # a program eager rejects is a generator bug: it should never be built
    assert outcome != "eager", f"eager rejects the generated program: {reason}\n{prog.describe()}"


def _seeded(test):
    if SEED is not None:
        from hypothesis import seed
        return seed(int(SEED))(test)
    return test


@_seeded
@_settings(default_examples=14)
@given(prog=programs())
def test_random_programs(prog):
    """Any mix of ops, static or dynamic shapes."""
    _check(prog)


@_seeded
@_settings(default_examples=6)
@given(prog=programs(max_steps=4, ops=[(op_reduce, 4), (op_scan, 1), (op_view, 2),
                                       (op_unary_float, 1), (op_binary, 1), (op_index, 1)]))
def test_reductions_and_views(prog):
    """Reductions, scans and indexing over views, the kernels with the most tiling logic."""
    _check(prog)
