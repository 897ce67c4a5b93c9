"""Access tracking: which programs stored (and loaded) each storage element, recorded while
the grid runs, turned into exact conflict, race and coverage facts afterwards.

Threads run contiguous chunks of programs in increasing order, each with its own records,
so the parallel run needs no atomics. Per thread and alias class the records start as a
log of intervals: one entry per access site execution whose lanes touched consecutive
elements (lo, hi exclusive, program, kind), which is what tiled kernels do. The first
execution that is not an interval (a gather, a transposed store, a log full) switches
that thread to per-element rows: the first and second distinct program per element
(`w1`/`w2` for stores, `r1`/`r2` for loads of stored-to storage), filled from its log
first, so the rows hold exactly what recording every element would have. Rows are
allocated uninitialised and only a switched thread initialises its own.

After the launch, if no thread switched and the intervals cannot hide a conflict or race
(stores pairwise disjoint, each load overlapping stores of its own program only), the
facts follow from the intervals; otherwise every thread's log is painted into its rows
and the rows are merged element by element. Either way the facts are the same.

Helpers prefixed `_` are called by generated kernels (`from ...tracking import *`).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from numba import njit, prange

__all__ = ["_record", "_break_run", "_end_run"]

STORE, LOAD = 0, 1  # the kind of a logged interval
NO_RUN, PER_ELEMENT = -1, -2  # run state `nx` of an access site execution (see `_break_run`)
LOG_FIELDS = 4  # lo, hi (exclusive), program, kind
ELEMENTS_PER_LOG_ENTRY = 32  # log capacity: one entry per 32 elements of the storage (at least 64)


@dataclasses.dataclass
class Tracking:
    """One alias class's records: per thread a row of `state` (number of logged intervals,
    or -1 once the thread records per element), its `log` and its element rows. After the
    launch, `merge` sets the summary (see `merge_tracking`) and what was stored: the
    sorted disjoint `stored_runs` [lo, hi) when the intervals sufficed, else `written`."""
    w1: np.ndarray
    w2: np.ndarray
    r1: np.ndarray
    r2: np.ndarray
    state: np.ndarray
    log: np.ndarray
    summary: Optional[np.ndarray] = None
    stored_runs: Optional[np.ndarray] = None
    _written: Optional[np.ndarray] = None

    @classmethod
    def allocate(cls, threads: int, size: int, reads: bool, program_dtype: type) -> "Tracking":
        """Records for a storage of `size` elements; `reads`: its loads are tracked too.
        Element rows stay uninitialised (untouched pages cost nothing) until a thread
        switches to them."""
        read_size = size if reads else 0
        capacity = max(64, size // ELEMENTS_PER_LOG_ENTRY)
        return cls(np.empty((threads, size), program_dtype), np.empty((threads, size), program_dtype),
                   np.empty((threads, read_size), program_dtype),
                   np.empty((threads, read_size), program_dtype),
                   np.zeros((threads, 1), np.int64), np.empty((threads, capacity, LOG_FIELDS), np.int64))

    def merge(self) -> None:
        exclusive, runs = exclusive_intervals(self.state, self.log)
        if exclusive:
            self.summary, self.stored_runs = no_conflicts(), runs
            return
        for c in range(self.state.shape[0]):
            _to_elements(self.w1[c], self.w2[c], self.r1[c], self.r2[c], self.state[c], self.log[c])
        self._written = np.empty(self.w1.shape[1], np.bool_)
        self.summary = merge_tracking(self.w1, self.w2, self.r1, self.r2, self._written)

    @property
    def written(self) -> np.ndarray:
        """Per storage element: whether any program stored it (after `merge`)."""
        if self._written is None:
            self._written = paint_runs(self.stored_runs, self.w1.shape[1])
        return self._written

    def unwritten(self, start: int, stop: int) -> tuple[int, int]:
        """(elements of the storage range [start, stop) no program stored, the first of
        them or -1), from the runs when the merge kept them: no element-sized pass."""
        if self.stored_runs is not None:
            return unwritten_in_runs(self.stored_runs, start, stop)
        part = self.written[start:stop]
        count = part.size - int(np.count_nonzero(part))
        return count, start + int(np.argmin(part)) if count else -1


def no_conflicts() -> np.ndarray:
    """The `merge_tracking` summary of records without conflicts or races."""
    return np.array([0, -1, -1, -1, 0, -1, -1, -1], np.int64)


# ---------------------------------------------------------------- in the generated kernel
@njit(inline="always")
def _record(first, second, e, pp):
    # first two distinct programs per element (a thread's programs arrive in increasing order)
    prev = first[e]
    if prev == -1:
        first[e] = pp
    elif prev != pp and second[e] == -1:
        second[e] = pp


@njit(inline="always")
def _paint(kind, w1, w2, r1, r2, lo, hi, pp):
    """Record elements lo..hi-1 as accessed by program pp, as per-element recording would."""
    for e in range(lo, hi):
        if kind == STORE:
            _record(w1, w2, e, pp)
        else:
            _record(r1, r2, e, pp)


@njit(cache=True, nogil=True)
def _to_elements(w1, w2, r1, r2, state, log):
    """Switch one thread's records from its interval log to its element rows (no-op if done)."""
    if state[0] < 0:
        return
    w1[:] = -1
    w2[:] = -1
    r1[:] = -1
    r2[:] = -1
    for k in range(state[0]):
        _paint(log[k, 3], w1, w2, r1, r2, log[k, 0], log[k, 1], log[k, 2])
    state[0] = -1


@njit(cache=True, nogil=True)
def _break_run(e, pp, lo, nx, kind, w1, w2, r1, r2, state, log):
    """A lane touched element e that does not extend the run [lo, nx) of its access site
    execution (the generated code extends runs itself). Returns the new run: e starts it
    if it is the execution's first lane; otherwise the thread switches to its element
    rows, where the run so far, e and the execution's later lanes are recorded."""
    if nx == NO_RUN:
        return e, e + 1
    _to_elements(w1, w2, r1, r2, state, log)
    _paint(kind, w1, w2, r1, r2, lo, nx, pp)
    _paint(kind, w1, w2, r1, r2, e, e + 1, pp)
    return lo, PER_ELEMENT


@njit(cache=True, nogil=True)
def _end_run(lo, nx, pp, kind, w1, w2, r1, r2, state, log):
    """An access site execution ended: log its run as an interval (or paint it when the
    thread records per element, switching first if the log is full)."""
    if nx < 0:
        return
    if state[0] == log.shape[0]:
        _to_elements(w1, w2, r1, r2, state, log)
    if state[0] < 0:
        _paint(kind, w1, w2, r1, r2, lo, nx, pp)
        return
    k = state[0]
    log[k, 0], log[k, 1], log[k, 2], log[k, 3] = lo, nx, pp, kind
    state[0] = k + 1


# ---------------------------------------------------------------- after the launch
@njit(cache=True)
def exclusive_intervals(state, log):
    """(True, the stored intervals [lo, hi) sorted) when every thread kept its interval
    log and the intervals cannot hide a conflict or race: stored intervals pairwise
    disjoint, each loaded interval overlapping only stored intervals of its own program.
    Conservative: (False, -) sends the records through the exact element merge."""
    threads = state.shape[0]
    stores = 0
    loads = 0
    for c in range(threads):
        if state[c, 0] < 0:
            return False, np.empty((0, 2), np.int64)
        for k in range(state[c, 0]):
            if log[c, k, 3] == STORE:
                stores += 1
            else:
                loads += 1
    lo = np.empty(stores, np.int64)
    hi = np.empty(stores, np.int64)
    prog = np.empty(stores, np.int64)
    reads = np.empty((loads, 3), np.int64)
    s = 0
    r = 0
    for c in range(threads):
        for k in range(state[c, 0]):
            if log[c, k, 3] == STORE:
                lo[s], hi[s], prog[s] = log[c, k, 0], log[c, k, 1], log[c, k, 2]
                s += 1
            else:
                reads[r, 0], reads[r, 1], reads[r, 2] = log[c, k, 0], log[c, k, 1], log[c, k, 2]
                r += 1
    order = np.argsort(lo)
    runs = np.empty((stores, 2), np.int64)
    for k in range(stores):
        runs[k, 0], runs[k, 1] = lo[order[k]], hi[order[k]]
        if k and runs[k, 0] < runs[k - 1, 1]:
            return False, runs
    lo, hi, prog = runs[:, 0].copy(), runs[:, 1].copy(), prog[order]
    # disjoint and sorted: hi is sorted too, so the stores overlapping a load are a range
    for k in range(loads):
        first = np.searchsorted(hi, reads[k, 0], side="right")
        last = np.searchsorted(lo, reads[k, 1], side="left")
        for j in range(first, last):
            if prog[j] != reads[k, 2]:
                return False, runs
    return True, runs


@njit(cache=True)
def paint_runs(runs, size):
    """Per element of a storage of `size`: whether one of the runs [lo, hi) covers it."""
    written = np.zeros(size, np.bool_)
    for k in range(runs.shape[0]):
        written[runs[k, 0]:runs[k, 1]] = True
    return written


@njit(cache=True)
def unwritten_in_runs(runs, start, stop):
    """(elements of [start, stop) outside the sorted disjoint runs, the first or -1)."""
    count = stop - start
    first = -1
    p = start  # runs so far cover [start, p) without a gap
    for k in range(runs.shape[0]):
        lo = max(runs[k, 0], start)
        hi = min(runs[k, 1], stop)
        if hi <= lo:
            continue
        count -= hi - lo
        if first < 0:
            if lo > p:
                first = p
            else:
                p = hi
    if first < 0 and p < stop:
        first = p
    return count, first


@njit(inline="always")
def _push(first, second, x):
    # Keep the two lowest distinct program ids seen at an element (inputs arrive in
    # program order, so "first two distinct" are the two lowest).
    if x < 0 or x == first or x == second:
        return first, second
    if first < 0:
        return x, second
    if second < 0:
        return first, x
    return first, second


@njit(inline="always")
def _merge_element(w1, w2, r1, r2, e, has_reads, stats):
    """Fold one element's per-thread records into stats (see `merge_tracking`)."""
    threads = w1.shape[0]
    wa, wb = -1, -1
    for c in range(threads):
        wa, wb = _push(wa, wb, np.int64(w1[c, e]))
        if w2[c, e] != -1:
            wa, wb = _push(wa, wb, np.int64(w2[c, e]))
    if wa < 0:
        return
    if wb >= 0:
        if stats[0] == 0:
            stats[1], stats[2], stats[3] = e, wb, wa
        stats[0] += 1
    if has_reads:
        ra, rb = -1, -1
        for c in range(threads):
            ra, rb = _push(ra, rb, np.int64(r1[c, e]))
            if r2[c, e] != -1:
                ra, rb = _push(ra, rb, np.int64(r2[c, e]))
        reader, writer = -1, -1
        if ra >= 0:
            if wb >= 0:
                reader, writer = ra, (wb if ra == wa else wa)
            elif ra != wa:
                reader, writer = ra, wa
            elif rb >= 0:
                reader, writer = rb, wa
        if reader >= 0:
            if stats[4] == 0:
                stats[5], stats[6], stats[7] = e, reader, writer
            stats[4] += 1


@njit(cache=True, parallel=True)
def merge_tracking(w1, w2, r1, r2, written):
    """Combine per-thread element rows of one storage into exact conflict/race facts.

    w1/w2 (r1/r2): [threads, elements] first and second distinct program that stored
    (loaded) each element within a thread's contiguous range of programs, -1 for none.
    Fills written[e] and returns int64[8]: conflicts, first conflict element, its second
    writer, its first writer, races, first race element, the racing reader, the writer it
    raced with. Element ranges are merged in parallel; per-range results are combined in
    element order, so the answer does not depend on the thread count.
    """
    n = w1.shape[1]
    has_reads = r1.shape[1] == n
    parts = 16
    stats = np.full((parts, 8), -1, np.int64)
    for k in prange(parts):
        stats[k, 0] = 0
        stats[k, 4] = 0
        for e in range(k * n // parts, (k + 1) * n // parts):
            # fast path: at most one program touched the element
            touched = 0
            for c in range(w1.shape[0]):
                touched += (w1[c, e] != -1) + 2 * (w2[c, e] != -1)
            written[e] = touched > 0
            if touched > 1 or (has_reads and touched == 1):
                _merge_element(w1, w2, r1, r2, e, has_reads, stats[k])
    out = np.full(8, -1, np.int64)
    out[0] = 0
    out[4] = 0
    for k in range(parts):
        for base in (0, 4):
            if stats[k, base] and not out[base]:
                out[base + 1:base + 4] = stats[k, base + 1:base + 4]
            out[base] += stats[k, base]
    return out
