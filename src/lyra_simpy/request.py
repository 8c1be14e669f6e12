"""Requests and their output record (the per-request JSONL contract, DESIGN §4).

A :class:`Request` lives only while it is in the system; when it ends, its outcome is
written into compact per-request arrays (:class:`~lyra_simpy.metrics.collector.Collector`)
and the object is dropped, so memory does not grow with finished requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "rejected", "unfinished"]

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
    "replica",
    "preemptions",
)


@dataclass(slots=True, eq=False)
class Request:
    """One request's state in the engine.

    Token accounting follows vLLM (V1 scheduler): a request emits its next token once
    ``input_tokens + generated_tokens`` tokens are in the KV cache. A prefill computes the
    prompt (plus, after a recompute preemption, every token generated so far) and emits
    one token; a decode step computes one token (the last one emitted) and emits the
    next. After every emitting step ``computed_tokens == input_tokens + generated_tokens - 1``.
    """

    index: int
    """Position in the workload (0-based); the record row."""
    request_id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    computed_tokens: int = 0
    """Tokens whose KV is in the cache (reset to 0 by a recompute preemption)."""
    generated_tokens: int = 0
    """Output tokens emitted so far."""
    blocks: int = 0
    """KV blocks this request holds."""
    cached_tokens: int = 0
    """Prompt tokens served from a prefix cache (0 without one)."""
    first_token_s: float | None = None
    last_token_s: float = 0.0
    """When the latest token-carrying chunk was emitted (for ITL)."""
    preemptions: int = 0
    running: bool = False
    """Whether the request holds a running slot (set by the engine)."""

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
