"""Differential fuzzing of the gxu compiler: random small torch programs, compiled vs eager.

`programs.py` holds a hypothesis strategy that builds a random chain of torch ops (pointwise
float/int/bool ops and transcendentals, casts, broadcasts, views and permutes, reductions,
scans, gather / index_select / embedding, cat) as Python source plus a recipe for its inputs
(random shapes with size 0 and 1 dimensions, non-contiguous and expanded inputs, sometimes
dynamic shapes: compiled with `dynamic=True` or automatic dynamic and called with two
different sizes). Each program is compiled with `torch.compile` on gxu inputs and compared
with eager on the CPU:

* integer and bool results, and float results that are exact by construction (small dyadic
  inputs and operations that do not round), must match eager exactly;
* other float results are judged the way Dynamo's accuracy checker (`torch._dynamo.utils.same`
  with `fp64_ref`) and Inductor's `check_model` (`reference_in_float`) do: against the program
  run in float64, the compiled error may be at most 3x eager's worst error plus a few ulps of
  the lowest float precision involved (Inductor keeps no intermediate fp16/bf16 rounding and
  may contract multiply-adds, so bit equality is not expected); NaN and inf positions must
  match eager;
* every launch recorded by `gxusim.launches()` stays within the active spec (grid product
  <= max_grid, num_warps <= max_num_warps) and carries no error-level finding.

A compile or run that fails with a clear "unsupported" error (NotImplementedError, the
emulator's `Unsupported`) is allowed but counted; any other error, and any mismatch, fails.

Running it
----------
CI (the default): `python3 -m pytest tests/fuzz -q` runs a fixed, derandomized set of
examples (a few minutes on a 2-core machine) plus the regression tests of failures found so
far (`test_regressions.py`; those not yet fixed are `xfail(strict=True)`).

Long runs: raise the example count and, to collect every failure instead of stopping (and
shrinking) at the first, give a log file::

    GXUSIM_FUZZ_EXAMPLES=500 GXUSIM_FUZZ_SEED=1 GXUSIM_FUZZ_COLLECT=/tmp/fuzz.jsonl \\
        python3 -m pytest tests/fuzz/test_fuzz.py -q -s -p no:cacheprovider

* `GXUSIM_FUZZ_EXAMPLES=N`: examples per fuzz test (default 14 and 6, see test_fuzz.py).
* `GXUSIM_FUZZ_SEED=S`: a random seed instead of the derandomized default (so repeated long
  runs see different programs); the failing program's source is printed either way.
* `GXUSIM_FUZZ_COLLECT=FILE`: append one JSON line per failure (program source, inputs,
  error) and carry on; a summary of outcomes (ok / unsupported / failures) is printed.

A failure prints the program as Python source (`fn`), its input recipe and both sizes of a
dynamic run; `programs.Program.from_json` / `run_program` replay it outside hypothesis.

A process keeps every kernel the emulator compiled for it (numba does not free machine
code): about 30 MB a program, so run a few hundred programs per process and reach
thousands with several processes on different seeds.
"""
