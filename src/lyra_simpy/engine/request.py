"""Requests and their output record (the per-request JSONL contract, DESIGN §4).

A :class:`Request` lives only while it is in the system; when it ends, its outcome is
written into compact per-request arrays (:class:`~lyra_simpy.metrics.collector.Collector`)
and the object is dropped, so memory does not grow with finished requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol


class SharedClock(Protocol):
    """What a request reads from the decode set it belongs to
    (:class:`~lyra_simpy.engine.decode_clock.DecodeSet`, which imports this module: the protocol
    keeps the import one way)."""

    epoch: int
    block_size: int
    last_emit_s: float


Status = Literal["ok", "rejected", "failed", "unfinished"]

#: Why a request was refused: the ``reject_reason`` of its record (DESIGN §4), one
#: name per cause. The summary counts each as ``rejected_<name>`` (always present, 0
#: when none), so the summary stays flat JSON with the same keys in every run.
REJECT_REASONS: dict[str, str] = {
    "never_fits_kv": (
        "its prompt plus output (its prompt alone on a prefill replica) can never be held "
        "by the KV pool of the replica or pool that would serve it"
    ),
    "exceeds_token_budget": (
        "without chunked prefill, its longest prefill (prompt plus all but one output "
        "token, after a recompute) exceeds max_num_batched_tokens"
    ),
    "slo": "SLO admission predicted it would miss the TTFT or TPOT SLO",
    "slo_defer_timeout": "SLO admission deferred it for max_defer_ms without admitting it",
}
RejectReason = Literal["never_fits_kv", "exceeds_token_budget", "slo", "slo_defer_timeout"]

#: Why an admitted request ended ``failed``: its record's ``reject_reason`` (the one
#: reason field of DESIGN §4), one name per cause, counted as ``failed_<name>`` (always
#: present, 0 when none). Failures come from the processes of :mod:`lyra_simpy.processes`.
FAIL_REASONS: dict[str, str] = {
    "replica_failure": (
        "the replica holding it failed, and it had no retry left (``max_retries``) or had "
        "already streamed tokens (``retry_streaming: false``)"
    ),
    "no_replica": (
        "no replica was serving when it arrived (or was retried), and none served within "
        "``cluster.no_replica_timeout_s`` (or before the run ended)"
    ),
}
FailReason = Literal["replica_failure", "no_replica"]

#: Field order of one JSONL record, exactly as DESIGN §4 names them.
RECORD_FIELDS = (
    "request_id",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "first_token_s",
    "finish_s",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
    "status",
    "reject_reason",
    "replica",
    "preemptions",
)


class Request:
    """One request's state in the engine.

    Token accounting follows vLLM (V1 scheduler): a request emits its next token once
    ``input_tokens + generated_tokens`` tokens are in the KV cache. A prefill computes the
    prompt (plus, after a recompute preemption, every token generated so far) and emits
    one token; a decode step computes one token (the last one emitted) and emits the
    next. After every emitting step ``computed_tokens == input_tokens + generated_tokens - 1``.

    While the request decodes in every iteration, the engine keeps it in a
    :class:`~lyra_simpy.engine.decode_clock.DecodeSet`: then ``computed_tokens``,
    ``generated_tokens``, ``blocks`` and ``last_token_s`` are read through the set's
    clock (one count for all members) instead of being written for each token.
    """

    __slots__ = (
        "_blocks",
        "_computed",
        "_generated",
        "_last_token_s",
        "arrival_s",
        "cache_upto",
        "cached_tokens",
        "epoch0",
        "finish_epoch",
        "first_token_s",
        "held",
        "index",
        "input_tokens",
        "keys",
        "member_of",
        "output_tokens",
        "preemptions",
        "request_id",
        "retries",
        "running",
    )

    def __init__(
        self,
        index: int,
        request_id: int,
        arrival_s: float,
        input_tokens: int,
        output_tokens: int,
        computed_tokens: int = 0,
        generated_tokens: int = 0,
        blocks: int = 0,
        cached_tokens: int = 0,
        first_token_s: float | None = None,
        last_token_s: float = math.nan,
        preemptions: int = 0,
        running: bool = False,
        keys: Sequence[int] = (),
    ) -> None:
        self.index = index
        """Position in the workload (0-based); the record row."""
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self._computed = computed_tokens
        self._generated = generated_tokens
        self._blocks = blocks
        self.cached_tokens = cached_tokens
        """Prompt tokens served from a prefix cache (0 without one)."""
        self.first_token_s = first_token_s
        self._last_token_s = last_token_s
        self.preemptions = preemptions
        self.running = running
        """Whether the request holds a running slot (set by the engine)."""
        self.member_of: SharedClock | None = None
        """The decode set whose clock counts this request's tokens (None: not in one)."""
        self.epoch0 = 0
        """The set's clock when the request joined it."""
        self.keys = keys
        """Prefix-cache keys of its content, one per unit (empty: no prefix sharing;
        see :mod:`lyra_simpy.workload.prefixes`)."""
        self.held: list[Any] = []
        """Prefix-cache units it references, in prefix order."""
        self.cache_upto = 0
        """Units of its content already in the prefix cache (held)."""
        self.finish_epoch = 0
        """The set's clock at which the request emits its last token."""
        self.retries = 0
        """Times it was sent to another replica after its replica failed."""

    def __repr__(self) -> str:
        return (
            f"Request(index={self.index}, computed_tokens={self.computed_tokens}, "
            f"generated_tokens={self.generated_tokens}, output_tokens={self.output_tokens})"
        )

    @property
    def computed_tokens(self) -> int:
        """Tokens whose KV is in the cache (reset to 0 by a recompute preemption)."""
        s = self.member_of
        return self._computed if s is None else self._computed + s.epoch - self.epoch0

    @computed_tokens.setter
    def computed_tokens(self, value: int) -> None:
        self._computed = value

    @property
    def generated_tokens(self) -> int:
        """Output tokens emitted so far."""
        s = self.member_of
        return self._generated if s is None else self._generated + s.epoch - self.epoch0

    @generated_tokens.setter
    def generated_tokens(self, value: int) -> None:
        self._generated = value

    @property
    def blocks(self) -> int:
        """KV blocks this request holds."""
        s = self.member_of
        if s is None:
            return self._blocks
        return -(-(self._computed + s.epoch - self.epoch0) // s.block_size)

    @blocks.setter
    def blocks(self, value: int) -> None:
        self._blocks = value

    @property
    def last_token_s(self) -> float:
        """When the latest token-carrying chunk was emitted (for ITL; NaN before the
        first token, so no time compares equal to it)."""
        s = self.member_of
        return self._last_token_s if s is None else s.last_emit_s

    @last_token_s.setter
    def last_token_s(self, value: float) -> None:
        self._last_token_s = value

    @property
    def pending_tokens(self) -> int:
        """Tokens to compute before the next token can be emitted (1 while decoding)."""
        return self.input_tokens + self.generated_tokens - self.computed_tokens

    @property
    def decoding(self) -> bool:
        """True once the prompt is in the cache and each step emits one token."""
        return (
            self.generated_tokens > 0
            and self.computed_tokens == self.input_tokens + self.generated_tokens - 1
        )
