"""Prefill/decode disaggregation: separate pools and the KV hand-off between them.

DistServe (OSDI'24), Splitwise (ISCA'24) and SGLang's PD mode run prompts on a prefill
pool and generation on a decode pool. Here (:mod:`lyra_simpy.cluster.dispatch` routes arrivals
over the prefill pool):

1. A prefill replica computes the prompt and emits the first token (TTFT is measured
   there), then hands the request off; its KV stays on the prefill replica until sent.
2. The hand-off queue (FIFO) picks a decode replica with a free running slot and KV
   room for the prompt's blocks, chosen by ``decode_router`` (``least_outstanding``
   or ``least_kv``), and reserves those blocks there. When no decode replica has room,
   the request waits, holding its prefill KV: the prefill pool fills up and stops
   admitting (back-pressure; nothing is lost).
3. The KV travels over the link, a SimPy ``Resource`` with ``max_concurrent`` transfers
   at a time: ``prompt tokens × kv_bytes_per_token / bandwidth + latency``
   (``kv_bytes_per_token`` given, or the catalog model's under a ``roofline`` cost).
   On arrival the prefill replica frees the KV and the request joins the decode
   replica's running batch, decoding from its second token.

Modelling choices: replicas in a disaggregated cluster step every iteration (no fused
runs: a hand-off can land at any moment); a request preempted on a decode replica is
recomputed there (the choice of decode replica asks its scheduler whether it can ever
run the request, recompute included, so it always can); a request no decode replica can
ever run is rejected at arrival on the prefill replica, before any work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import simpy
from pydantic import ConfigDict, NonNegativeFloat, PositiveFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import RejectReason, Request


class LinkConfig(Closed):
    """The KV-transfer link between the pools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bandwidth_gb_s: PositiveFloat
    """GB/s (10⁹ bytes) per transfer: NVLink-class ~100-450, InfiniBand NDR 50, 100 GbE
    12.5."""
    latency_ms: NonNegativeFloat = 0.0
    """Fixed time per transfer (connection, first byte)."""
    max_concurrent: PositiveInt = 1
    """Transfers in flight at once (the rest queue for the link)."""
    kv_bytes_per_token: PositiveInt | None = None
    """KV bytes per prompt token (None: from the model catalog of a ``roofline`` cost)."""


@dataclass
class Transfers:
    """Per-request hand-off timings (NaN where a request had none)."""

    queued_ms: dict[int, float] = field(default_factory=dict)
    """Time from the first token to the start of the transfer (waiting for room)."""
    transfer_ms: dict[int, float] = field(default_factory=dict)
    """Time on the link, queueing for it included."""
    decode_replica: dict[int, int] = field(default_factory=dict)


class HandOff:
    """The queue between the pools, the link, and the choice of decode replica."""

    def __init__(
        self,
        env: simpy.Environment,
        link: LinkConfig,
        bytes_per_token: int,
        decode: Sequence[Any],
        decode_router: Literal["least_outstanding", "least_kv"],
        reject: Any,
    ) -> None:
        self.env = env
        self.link = simpy.Resource(env, capacity=link.max_concurrent)
        self._latency_s = link.latency_ms / 1000.0
        self._bandwidth = link.bandwidth_gb_s * 1e9
        self._s_per_token = bytes_per_token / self._bandwidth
        self.decode = list(decode)
        self._by = decode_router
        self._reject = reject
        self.pending: deque[tuple[Request, Any, float]] = deque()
        self._incoming = [0] * len(self.decode)
        """Requests reserved on each decode replica and not yet delivered."""
        self.timings = Transfers()

    def add_decode(self, replica: Any) -> None:
        self.decode.append(replica)
        self._incoming.append(0)

    def set_bytes_per_token(self, bytes_per_token: int) -> None:
        self._s_per_token = bytes_per_token / self._bandwidth

    @property
    def busy(self) -> bool:
        """Requests wait for room or are on the link."""
        return bool(self.pending) or any(self._incoming)

    def refusal(self, req: Request) -> RejectReason | None:
        """Why no decode replica can ever serve *req* (None: one can): the first
        replica's reason (the prefill replica asks at arrival, before any work)."""
        reasons = [_decode_refusal(d, req) for d in self.decode]
        return None if None in reasons else reasons[0]

    def hand_off(self, req: Request, prefill: Any, now: float) -> None:
        """*req* emitted its first token on *prefill* at *now*: send it on."""
        reason = self.refusal(req)
        if reason is not None:  # (checked at arrival already: a safety net)
            prefill.release_handed_off(req)
            self._reject(req, reason)
            return
        self.pending.append((req, prefill, now))
        self.dispatch()

    def dispatch(self) -> None:
        """Start transfers, in order, while a decode replica has room."""
        while self.pending:
            req, prefill, since = self.pending[0]
            target = self._choose(req)
            if target is None:
                return  # back-pressure: it waits, holding its prefill KV
            self.pending.popleft()
            decode = self.decode[target]
            decode.kv.allocate(blocks_for(req.input_tokens, decode.kv.block_size))
            self._incoming[target] += 1
            self.timings.queued_ms[req.index] = (self.env.now - since) * 1000.0
            self.env.process(self._send(req, prefill, target))

    def _choose(self, req: Request) -> int | None:
        best = None
        best_key: tuple[float, int] | None = None
        for i, d in enumerate(self.decode):
            need = blocks_for(req.input_tokens, d.kv.block_size)
            busy = len(d.running) + len(d.waiting) + len(d.source.queue) + self._incoming[i]
            if need > d.kv.free or busy >= d.scheduler_width or _decode_refusal(d, req):
                continue
            key = (busy, i) if self._by == "least_outstanding" else (-d.kv.free, i)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best

    def _send(self, req: Request, prefill: Any, target: int) -> Generator[simpy.Event, Any, None]:
        start = self.env.now
        with self.link.request() as slot:
            yield slot
            yield self.env.timeout(self._latency_s + req.input_tokens * self._s_per_token)
        self.timings.transfer_ms[req.index] = (self.env.now - start) * 1000.0
        self.timings.decode_replica[req.index] = self.decode[target].replica_id
        prefill.release_handed_off(req)
        self._incoming[target] -= 1
        decode = self.decode[target]
        req.blocks = blocks_for(req.input_tokens, decode.kv.block_size)
        decode.receive(req)
        self.dispatch()


def _decode_refusal(decode: Any, req: Request) -> RejectReason | None:
    """Why the scheduler of *decode* can never run *req*, a recompute after a
    preemption included (None: it can)."""
    kv = decode.kv
    reason: RejectReason | None = decode.scheduler.refusal(req, kv.num_blocks, kv.block_size)
    return reason
