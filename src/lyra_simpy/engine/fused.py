"""Fused decode runs: the arithmetic of advancing many decode iterations as one event.

A *run* starts when every running request is decoding. Until the next arrival is due
(or the clock stops, or the KV pool would overflow) each iteration decodes every
running request, so the batch changes only when a request emits its last token; with
``absorb_finishes`` those completions happen inside the run (the batch shrinks from one
*segment* of iterations to the next), otherwise the run ends at the first one.

:func:`plan_run` computes, without SimPy and without changing any request, everything
the unfused engine would see iteration by iteration: end times (a left-to-right running
sum of the same per-iteration durations the unfused engine adds one by one), sequences
per iteration, and KV blocks in use (the step that needs a new block for request *i* is
the one whose token lands at a block boundary; a finished request's blocks are freed
after its last step). The engine then commits the run by advancing its decode set's
clock (:mod:`lyra_simpy.engine.decode_clock`): only the requests that finish are touched.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import accumulate

from lyra_simpy.cost.base import CostModel
from lyra_simpy.engine.decode_clock import DecodeSet


@dataclass(slots=True)
class DecodeRun:
    """What a run of decode iterations produces, one entry per iteration."""

    start_s: float
    first_s: float
    """Duration of the first iteration (``start_s + first_s == ends_s[0]`` exactly)."""
    ends_s: list[float]
    seqs: list[int]
    """Sequences decoding in each iteration."""
    kv_blocks: list[int]
    """Blocks in use during each iteration (after its allocation, before its frees)."""
    kv_before: int = 0
    """Blocks in use before the first iteration allocates."""
    done_at: list[int] = field(default_factory=list)
    """Iterations (0-based, increasing) at whose end members finish inside the run (not
    the last iteration's: the run ends there, and its commit tells)..."""
    done_n: list[int] = field(default_factory=list)
    """... how many have finished by then, counted from the run's start ..."""
    done_blocks: list[int] = field(default_factory=list)
    """... and the blocks they free then."""

    def truncate(self, k: int) -> None:
        """Keep the first *k* iterations."""
        del self.ends_s[k:]
        del self.seqs[k:]
        del self.kv_blocks[k:]
        i = bisect_left(self.done_at, k)
        del self.done_at[i:], self.done_n[i:], self.done_blocks[i:]

    def state_at(self, now_s: float) -> tuple[int, int]:
        """(members finished, blocks in use) at *now_s*, a time inside the run, as a
        router sees them stepping one iteration at a time: the iterations that started
        before *now_s* and end by it are committed (their finishers freed), the one
        running then holds its blocks, and one starting at *now_s* has not allocated
        yet (a cluster routes before its replicas plan, :mod:`lyra_simpy.engine.timing`)."""
        if now_s <= self.start_s:
            return 0, self.kv_before
        ends = self.ends_s
        j = bisect_left(ends, now_s, 0, len(ends) - 1)  # started before now_s
        committed = j + 1 if ends[j] <= now_s else j
        i = bisect_left(self.done_at, committed)
        used = self.kv_blocks[j]
        if i and self.done_at[i - 1] == j:  # (only when it ended: committed == j + 1)
            used -= self.done_blocks[i - 1]
        return (self.done_n[i - 1] if i else 0), used

    def cut_at(self, now_s: float) -> bool:
        """End the run with the iteration running at *now_s* or ending then (a request
        arrives: a stepped engine takes it at that iteration's end); whether it got
        shorter."""
        k = bisect_left(self.ends_s, now_s) + 1
        if k >= len(self.ends_s):
            return False
        self.truncate(k)
        return True


SPAN_CHUNK = 32
"""Iterations a run's segment is first costed for when an arrival is due: a segment
runs to the next member's last token, often hundreds of iterations, but the arrival
ends the run after a few dozen here (the benchmark: ~13 on average), so the segment is
costed in chunks of doubling size from this one until an iteration ends at or after
the arrival. The times are those of costing it whole (the cost protocol: a span's
element *j* is the single step's time; the sum runs left to right either way)."""


def _segment_ends(
    cost: CostModel,
    rows: int,
    context_tokens: int,
    growth: int,
    length: int,
    start_s: float,
    horizon_s: float | None,
) -> tuple[float, list[float]]:
    """(The first iteration's time, the end times) of *length* decode iterations from
    *start_s* (``decode_span_s(rows, context_tokens, growth, length)`` summed), or of
    as many as reach *horizon_s* (see :data:`SPAN_CHUNK`)."""
    k = length if horizon_s is None else min(length, SPAN_CHUNK)
    durations = cost.decode_span_s(rows, context_tokens, growth, k)
    ends = list(accumulate(durations, initial=start_s))
    del ends[0]
    while horizon_s is not None and k < length and ends[-1] < horizon_s:
        more = min(length - k, k)
        tail = list(
            accumulate(
                cost.decode_span_s(rows, context_tokens + growth * k, growth, more),
                initial=ends[-1],
            )
        )
        del tail[0]
        ends += tail
        k += more
    return durations[0], ends


def plan_run(
    members: DecodeSet,
    absorb_finishes: bool,
    start_s: float,
    kv_used: int,
    num_blocks: int,
    rows: int,
    cost: CostModel,
    horizon_s: float | None,
    stop_s: float | None,
    strict_horizon: bool = False,
) -> DecodeRun | None:
    """Plan a run of decode iterations of the decode set *members* from *start_s*
    (read only: the engine advances the set once the run has happened).

    *kv_used* blocks are in use before the first iteration (all the members');
    *rows* is the least row count the cost model is charged (a static batch's width).
    The run ends at the first iteration ending at or after *horizon_s* (the next
    arrival; with *strict_horizon*, before it: the run may then be empty), before any
    iteration ending at or after *stop_s* (at least one iteration is kept: it never
    completes), before an iteration that would overflow the KV pool,
    and, unless *absorb_finishes*, at the first member's last token. Returns None when
    the first iteration itself does not fit (the scheduler must preempt).
    """
    bs = members.block_size
    n = members.n
    sum_c = members.context_tokens
    hist = members.hist_now()  # a copy: the segments below change it
    epoch = members.epoch
    groups = members.by_finish
    used = kv_used + hist[0]  # members whose blocks are full need one more first
    if used > num_blocks:
        return None
    run = DecodeRun(start_s, 0.0, [], [], [], kv_used)
    ends, seqs, kvs = run.ends_s, run.seqs, run.kv_blocks
    ahead = sorted(groups) if absorb_finishes else [epoch + members.fewest_left()]
    t = start_s
    a = 0
    for finish in ahead:
        b = finish - epoch  # iterations until a member's last token
        length = b - a
        first, seg_ends = _segment_ends(
            cost, n if n > rows else rows, sum_c + n * a, n, length, t, horizon_s
        )
        if not a:
            run.first_s = first
        m = len(seg_ends)  # (fewer than length when the horizon came first)
        # Blocks in use at each step: one more for each request whose token lands on a
        # block boundary there (steps a+1, a+2, ... read hist from (a+1) mod bs on).
        shift = (a + 1) % bs
        inc = hist[shift:] + hist[:shift]
        inc *= (m - 1) // bs + 1
        del inc[m - 1 :]
        seg_kv = list(accumulate(inc, initial=used))
        cut = m
        arrived = horizon_s is not None and seg_ends[-1] >= horizon_s
        if arrived:
            cut = bisect_left(seg_ends, horizon_s or 0.0) + (0 if strict_horizon else 1)
        if cut and stop_s is not None and seg_ends[cut - 1] >= stop_s:
            # Keep the run's first iteration even so: it never completes, as unfused.
            cut = bisect_left(seg_ends, stop_s, 0, cut) or (0 if ends else 1)
        if cut and seg_kv[cut - 1] > num_blocks:
            cut = bisect_left(seg_kv, num_blocks + 1, 0, cut)
        ends.extend(seg_ends[:cut])
        kvs.extend(seg_kv[:cut])
        seqs.extend([n] * cut)
        if cut < length or arrived or not absorb_finishes:
            break
        # Requests with b steps to go emitted their last token at step b - 1: free them.
        freed = 0
        for req in groups[b + epoch]:
            comp = req.computed_tokens  # as before the run: it is committed afterwards
            freed += (comp + b + bs - 1) // bs
            sum_c -= comp + 1  # (sum_c holds contexts at step 0)
            hist[-comp % bs] -= 1
            n -= 1
        run.done_at.append(len(ends) - 1)
        run.done_n.append(members.n - n)
        run.done_blocks.append(freed)
        used = seg_kv[-1] - freed + hist[b % bs]
        if n == 0 or used > num_blocks:
            break
        t = seg_ends[-1]
        a = b
    return run
