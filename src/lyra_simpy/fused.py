"""The engine side of fused runs: advancing every decoding request through many
iterations as one SimPy event, and committing them (the arithmetic is in
:mod:`lyra_simpy.span`; when runs are allowed is the engine's rule, see
:mod:`lyra_simpy.engine`)."""

from __future__ import annotations

from collections.abc import Generator
from operator import sub
from typing import TYPE_CHECKING, Any

import simpy

from lyra_simpy.clock import exact_delay, timeout_at
from lyra_simpy.span import DecodeRun, plan_run

if TYPE_CHECKING:
    from lyra_simpy.engine import Replica

Process = Generator[simpy.Event, Any, Any]


def fused_run(
    self: Replica, origin: float, lead: float, start: float, rows: int, absorb: bool
) -> Process:
    """Advance every running request through decode iterations from *start* as one
    event; the clock reads *origin* (``origin + lead == start``: an iteration already
    committed may come first). Returns False, doing nothing, when the KV pool cannot
    hold the first iteration (the scheduler must preempt), and None when the next
    arrival is due within it (``strict_horizon``: step it instead).

    Carried across arrivals (``Replica.carry``: a cluster whose router reads the
    replicas' state), a run is planned up to a horizon of the dispatcher's choosing and
    is ``Replica.live`` while under way: the router reads the state it would have at
    each arrival from the plan (:meth:`~lyra_simpy.span.DecodeRun.state_at`), and
    :func:`cut_run` ends it early when an arrival is routed here."""
    kv, dset = self.kv, self.decoding
    carry = self.carry
    run = plan_run(
        dset, absorb, start, kv.used, kv.num_blocks, rows, self.cost,
        self.source.carry_horizon_s() if carry else self.source.next_s(),  # type: ignore[attr-defined]
        self.stop_s, self.strict_horizon and not carry,
    )  # fmt: skip
    if run is None:
        return False
    if not run.ends_s:
        return None  # the next arrival comes within the first iteration
    ends = run.ends_s
    # Land exactly on the unfused end time; if a rounding tie makes it unreachable
    # in one addition, end the run earlier (one step from *start* is always exact).
    k = len(ends)
    delay = exact_delay(origin, ends[k - 1])
    while delay is None and k > 1:
        k -= 1
        delay = exact_delay(origin, ends[k - 1])
    if delay is None:  # land on the run's start first (after a committed iteration)
        if lead:
            yield self.env.timeout(lead)
        delay = run.first_s
    run.truncate(k)
    # Each iteration holds its blocks from its start: an iteration still running at
    # the stop counts toward the peak, as in the unfused engine (only a run's first
    # iteration may be; the rest count once the run is committed: it may be cut).
    kv.note_peak(run.kv_blocks[0])
    if not carry:
        yield self.env.timeout(delay)
    else:
        self.live = run
        try:
            yield self.env.timeout(delay)
        except simpy.Interrupt:  # cut_run: a request was routed here
            yield timeout_at(self.env, run.ends_s[-1])
        self.live = None
    kv.note_peak(max(run.kv_blocks))
    commit_run(self, run)
    return True


def cut_run(self: Replica, now_s: float) -> None:
    """A request routed to *self* arrives at *now_s* while a fused run carried across
    arrivals is under way (``Replica.live``): the run ends with the iteration running
    then, where a stepped engine would take the request."""
    run = self.live
    if run is not None and run.cut_at(now_s):
        assert self.process is not None
        self.process.interrupt()


def commit_run(self: Replica, run: DecodeRun) -> None:
    """Emit the run's tokens: every member decodes until its last token or the end."""
    dset, collector = self.decoding, self.collector
    start, ends = run.start_s, run.ends_s
    last = dset.last_emit_s
    collector.itl(ends[0] - last, dset.n)  # everyone last emitted at *last*
    done = dset.advance(ends)
    # In use after the run: the last iteration's blocks less those of the requests
    # that finished in it (earlier finishers were freed inside the run). Told by the
    # clock, not by the time: iterations of zero cost end at the same time.
    final = dset.epoch
    used = run.kv_blocks[-1]
    if self.cache is not None:  # the run ended at its first finish: _finish frees
        self.kv.set_used(used)
    else:
        for req in done:
            if req.finish_epoch == final:
                used -= req.blocks
            req.blocks = 0
        self.kv.set_used(used)
    if done:
        self._finish(done)
    collector.span(self.replica_id, ends, start, run.seqs, run.kv_blocks, len(self.waiting))
    weights = run.seqs[1:]
    if weights:
        collector.itl_pairs(list(map(sub, ends[1:], ends[:-1])), weights)
