"""Where a request enters a replica: taken from its source when due, refused when it can
never be served here, and otherwise queued, rejected or deferred by the admission policy.

The intake owns the deferred requests (outside the scheduler's queue, decided again at
every scheduling point) and appends admitted ones to the replica's waiting queue. A
request that arrives with its prompt already computed (a decode replica of a
disaggregated cluster: its KV came from a prefill replica) goes straight to running.
It holds the replica's ``waiting`` and ``running`` containers themselves: whoever empties
them clears them in place (``Replica.stop`` does), never rebinds them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.errors import SimulationError
from lyra_simpy.metrics.collector import Collector
from lyra_simpy.policies.admission import Admission
from lyra_simpy.policies.base import EngineView
from lyra_simpy.workload.source import Feed


class Intake:
    """A replica's intake: *source* feeds it, *refusal* says why a request can never be
    served (None: it can), *admission* decides the rest (None: admit every arrival,
    nothing asked), *view* is the replica's state at a time (what admission reads)."""

    def __init__(
        self,
        replica_id: int,
        source: Feed,
        collector: Collector,
        waiting: deque[Request],
        running: list[Request],
        refusal: Callable[[Request], RejectReason | None],
        admission: Admission | None,
        view: Callable[[float], EngineView],
    ) -> None:
        self.replica_id = replica_id
        self.source = source
        self.collector = collector
        self.waiting = waiting
        self.running = running
        self.refusal = refusal
        self.admission = None if admission is None or admission.admits_all else admission
        self.view = view
        self.deferred: deque[Request] = deque()
        """Requests the admission deferred, oldest first: outside the scheduler's queue,
        decided again at every scheduling point (no iteration is fused while any wait)."""

    def pull(self, now: float) -> None:
        """Take every arrival due by *now* (and decide the deferred ones again first)."""
        refusal = self.refusal
        admission = self.admission
        collector = self.collector
        source = self.source
        if self.deferred:
            self._redecide(now)
        # A rejection ends a closed-loop request at once; its client's next request may
        # be due now too, so take arrivals until none is due (a source without feedback
        # gave every due one the first time).
        again = source.feedback
        due = source.pop_until(now)
        while due:
            for req in due:
                if req.computed_tokens:  # its KV came from a prefill replica: it decodes
                    req.running = True
                    self.running.append(req)
                    continue
                collector.assign(req, self.replica_id)
                reason = refusal(req)
                if reason is not None:
                    collector.reject(req, reason)
                    source.on_finish(now)
                elif admission is None:
                    self.waiting.append(req)
                else:
                    self._admit(req, now)
            due = source.pop_until(now) if again else []

    def _admit(self, req: Request, now: float) -> None:
        """Ask the admission about *req*: queue, reject or defer it."""
        assert self.admission is not None
        decision = self.admission.decide(req, self.view(now))
        if decision == "admit":
            self.waiting.append(req)
        elif decision == "reject" or decision == "timeout":
            self.collector.reject(req, "slo" if decision == "reject" else "slo_defer_timeout")
            self.source.on_finish(now)
        elif decision == "defer":
            self.deferred.append(req)
        else:
            raise SimulationError(f"admission returned {decision!r}")

    def _redecide(self, now: float) -> None:
        """Decide the deferred requests again, oldest first."""
        held = self.deferred
        self.deferred = deque()
        for req in held:
            self._admit(req, now)
