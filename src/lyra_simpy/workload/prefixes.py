"""Shared prefixes: which requests' prompts begin with the same tokens.

A prompt is cut into *units* of ``unit_tokens`` tokens; unit *u* of a request gets a key
that hashes its content and the key of unit *u − 1* (vLLM's chained block hashes), so
two requests share a key exactly when they share the whole prefix up to that unit. The
prefix cache (:mod:`lyra_simpy.policies.prefix_cache`) reuses full units only.

* ``system_prompt``: a share of the requests start with one of *groups* system
  prompts of ``prefix_tokens`` tokens (the group drawn uniformly), *prepended* to the
  drawn prompt — so those prompts are ``prefix_tokens`` longer. The unit that holds the
  end of the system prompt and the start of the user's text is the request's own.
* ``conversation``: multi-turn chats. *concurrent* conversations are open at once;
  arrival *i* is the next turn of conversation slot ``i mod concurrent``, each
  conversation has *turns* turns, then its slot starts a new one. A turn's prompt is
  the whole history (earlier prompts' new text and answers) plus its drawn input
  tokens, so it can reuse the previous turn's prompt *and* answer.
* ``trace``: the ``hash_ids`` of a Mooncake trace (512-token blocks; equal ids mean
  reusable KV), so a replay shares exactly what the real traffic shared.

The unit is the KV block size for the synthetic kinds (vLLM caches whole blocks) and
the trace's block for ``trace``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, PositiveInt

from lyra_simpy.config import Closed

Ints = npt.NDArray[np.int64]
Keys = list[tuple[int, ...]]


class _Prefix(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoPrefix(_Prefix):
    """Every prompt is its own (no sharing)."""

    name: Literal["none"] = "none"


class SystemPromptPrefix(_Prefix):
    name: Literal["system_prompt"] = "system_prompt"
    groups: PositiveInt
    """Distinct system prompts."""
    prefix_tokens: PositiveInt
    """Length of each system prompt."""
    share: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Fraction of requests that carry a system prompt."""


class ConversationPrefix(_Prefix):
    name: Literal["conversation"] = "conversation"
    turns: PositiveInt
    """Turns per conversation."""
    concurrent: PositiveInt
    """Conversations open at once (arrivals are dealt to them in turn)."""


class TracePrefix(_Prefix):
    """The trace's own block ids (a ``trace`` arrival in Mooncake format)."""

    name: Literal["trace"] = "trace"
    unit_tokens: PositiveInt = 512
    """Tokens per trace block (Mooncake: 512)."""


PrefixConfig = Annotated[
    NoPrefix | SystemPromptPrefix | ConversationPrefix | TracePrefix,
    Field(discriminator="name"),
]


def _chain(ids: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Chained keys: each hashes its unit's content id and the previous key."""
    keys = []
    prev = 0
    for content in ids:
        prev = hash((prev, *content))
        keys.append(prev)
    return tuple(keys)


def system_prompt_keys(
    cfg: SystemPromptPrefix, rng: np.random.Generator, inp: Ints, unit: int, start: int = 0
) -> tuple[Ints, Keys]:
    """Prompts with the system prompts prepended, and their keys (*inp*: requests
    *start*, *start* + 1, …)."""
    n = len(inp)
    has = rng.random(n) < cfg.share
    group = rng.integers(0, cfg.groups, size=n)
    inp = inp + np.where(has, cfg.prefix_tokens, 0)
    shared_units = cfg.prefix_tokens // unit
    keys: Keys = []
    for i in range(n):
        full = int(inp[i]) // unit
        if has[i]:
            g = int(group[i])
            ids = [(1, g, u) for u in range(min(shared_units, full))]
            ids += [(2, start + i, u) for u in range(len(ids), full)]
        else:
            ids = [(2, start + i, u) for u in range(full)]
        keys.append(_chain(ids))
    return inp, keys


def conversation_keys(
    cfg: ConversationPrefix,
    inp: Ints,
    out: Ints,
    unit: int,
    start: int = 0,
    history: dict[int, int] | None = None,
) -> tuple[Ints, Keys]:
    """Each turn's prompt (history + its new tokens) and the keys of its whole context
    (prompt and answer: the next turn reuses both). *inp* and *out* are requests
    *start*, *start* + 1, …; *history* (conversation → tokens so far) carries open
    conversations from the requests before them, and is updated."""
    n = len(inp)
    prompts = np.empty(n, dtype=np.int64)
    history = {} if history is None else history
    keys: Keys = []
    for j in range(n):
        i = start + j
        k = i // cfg.concurrent
        conv = (k // cfg.turns) * cfg.concurrent + i % cfg.concurrent
        if k % cfg.turns == 0:
            history[conv] = 0
        prompts[j] = history[conv] + int(inp[j])
        history[conv] = int(prompts[j]) + int(out[j])
        full = history[conv] // unit
        keys.append(_chain([(3, conv, u) for u in range(full)]))
    return prompts, keys


def trace_keys(hash_ids: list[tuple[int, ...]], inp: Ints, unit: int) -> Keys:
    """Keys of the replayed rows' full blocks (a last partial block is never reused)."""
    return [
        _chain([(4, h) for h in ids[: int(tokens) // unit]])
        for ids, tokens in zip(hash_ids, inp, strict=True)
    ]


def unit_tokens(cfg: object, block_size: int) -> int:
    """Tokens per unit of *cfg*'s keys: the trace's block, else the KV block."""
    return cfg.unit_tokens if isinstance(cfg, TracePrefix) else block_size


def reuse_bound(keys: Sequence[Sequence[int]], inp: Ints, unit: int) -> float:
    """Token hit rate of an unlimited cache that serves the requests one after another
    in arrival order (each request's units cached before the next arrives): the upper
    bound a real cache approaches. Hits follow the engine's rules (whole units, the
    last prompt token always computed)."""
    seen: set[int] = set()
    hit = 0
    for row, tokens in zip(keys, inp.tolist(), strict=True):
        limit = min(len(row), (tokens - 1) // unit)
        u = 0
        while u < limit and row[u] in seen:
            u += 1
        hit += u * unit
        seen.update(row)
    total = int(inp.sum())
    return hit / total if total else 0.0
