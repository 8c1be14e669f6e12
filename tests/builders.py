"""Requests in hand-built scheduler states, shared by the scheduler unit tests (tests/ is
on the import path through its conftest)."""

from __future__ import annotations

from lyra_simpy.kv import blocks_for
from lyra_simpy.request import Request

BS = 16
"""Block size of the hand-built views."""


def waiting_req(i: int, input_tokens: int, output_tokens: int = 8) -> Request:
    return Request(i, i, float(i), input_tokens, output_tokens)


def decoding_req(i: int, input_tokens: int, generated: int, output_tokens: int = 100) -> Request:
    """A running request after *generated* emitted tokens (KV holds all but the last)."""
    computed = input_tokens + generated - 1
    return Request(
        i, i, float(i), input_tokens, output_tokens, computed_tokens=computed,
        generated_tokens=generated, blocks=blocks_for(computed, BS), running=True,
    )  # fmt: skip
