"""What a live endpoint accepts, checked before anything is sent: the prompt token-id
range and the context length.

A prompt token id at or above the model's vocabulary size kills vLLM's worker (issue
21), so the replay draws its ids from a range known to fit:

* the vocabulary size comes from ``--vocab-size`` (:attr:`ReplayConfig.vocab_size
  <lyra_simpy.live.replay.ReplayConfig.vocab_size>`) or else from the endpoint:
  ``GET /v1/models`` → ``data[0].meta.n_vocab`` (llama.cpp's server, ``model_meta()``).
  vLLM does not report it (its ``/v1/models`` has ``max_model_len`` only): give the
  flag (``vocab_size`` in the model's ``config.json``);
* the range is ``--token-ids LOW:HIGH`` if given, which must fit the vocabulary
  (``HIGH`` ≤ the size); otherwise the default ``[1000, 30000)``
  (:class:`~lyra_simpy.live.workload.TokenIds`) with ``HIGH`` lowered to the
  vocabulary size. A vocabulary of 1000 ids or fewer needs ``--token-ids``.

The served model's name is ``data[0].id`` of ``/v1/models``: the replay and the profile
send it as every request's ``model`` (vLLM answers 404 "The model `default` does not
exist" to any other name; llama.cpp ignores the field).

The context length is ``data[0].max_model_len`` of ``/v1/models`` (vLLM): a request
whose prompt and output tokens exceed it would be refused by the engine, so the replay
fails first, naming the request. Every failure is one line (:class:`LyraError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from lyra_simpy.errors import LyraError
from lyra_simpy.live.workload import Plan, TokenIds


@dataclass(frozen=True)
class Limits:
    """What the endpoint says about its model (None: not reported)."""

    vocab_size: int | None = None
    max_model_len: int | None = None
    vocab_source: str | None = None
    """Where ``vocab_size`` came from (flag or endpoint field)."""
    model: str | None = None
    """The served model's name (``data[0].id``), sent as each request's ``model``."""

    def body(self, extra: dict[str, Any]) -> dict[str, Any]:
        """A request's extra JSON fields: the served model's name, then *extra* (which
        may name another model)."""
        return {"model": self.model, **extra} if self.model is not None else dict(extra)


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def endpoint_limits(base_url: str, timeout_s: float = 5.0) -> Limits:
    """The vocabulary size and context length ``/v1/models`` reports (empty
    :class:`Limits` when it reports neither or does not answer)."""
    try:
        with httpx.Client(timeout=timeout_s) as client:
            resp = client.get(base_url.rstrip("/") + "/v1/models")
        data = resp.json() if resp.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return Limits()
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        return Limits()
    model = models[0]
    meta = model.get("meta")
    vocab = _positive(meta.get("n_vocab")) if isinstance(meta, dict) else None
    name = model.get("id")
    return Limits(
        vocab_size=vocab,
        max_model_len=_positive(model.get("max_model_len")),
        vocab_source="/v1/models meta.n_vocab" if vocab is not None else None,
        model=name if isinstance(name, str) and name else None,
    )


def with_vocab(limits: Limits, vocab_size: int | None) -> Limits:
    """*limits* with the ``--vocab-size`` flag's value, which wins over the endpoint's."""
    if vocab_size is None:
        return limits
    return Limits(vocab_size, limits.max_model_len, "--vocab-size", limits.model)


def token_range(ids: TokenIds | None, limits: Limits, name: str = "--token-ids") -> TokenIds:
    """The range to draw prompt ids from (module docstring); *ids* None: the default;
    *name*: how errors call the range's setting."""
    vocab = limits.vocab_size
    if vocab is None:
        return ids or TokenIds()
    where = f"the model's vocabulary of {vocab} ids ({limits.vocab_source})"
    if ids is not None:
        if ids.high > vocab:
            raise LyraError(
                f"{name}: got {ids.low}:{ids.high}, must lie in [0, {vocab}) "
                f"({where}): HIGH <= {vocab}"
            )
        return ids
    default = TokenIds()
    high = min(default.high, vocab)
    if high <= default.low:
        raise LyraError(
            f"token ids: the default range starts at {default.low}, above {where}; "
            f"give {name} LOW:HIGH with HIGH <= {vocab}"
        )
    return TokenIds(low=default.low, high=high)


def check_lengths(plan: Plan, limits: Limits) -> None:
    """Fail when a planned request's prompt plus output exceeds ``max_model_len``."""
    cap = limits.max_model_len
    if cap is None:
        return
    for i, (prompt, out) in enumerate(zip(plan.prompts, plan.output_tokens, strict=True)):
        if len(prompt) + out > cap:
            raise LyraError(
                f"request {i}: {len(prompt)} prompt + {out} output tokens, must be <= "
                f"max_model_len {cap} (from the endpoint's /v1/models)"
            )
