"""One streamed request to a live serving endpoint, timed as vLLM's benchmark times it.

Two wire formats (``api``):

* ``openai``: ``POST /v1/completions`` with the prompt as an array of token ids (SGLang,
  vLLM and llama.cpp's server accept it), ``model`` ``default`` unless the caller's
  *extra* names the served model (replay and profile send ``/v1/models``'
  ``data[0].id``: vLLM refuses any other name with 404; :mod:`.limits`),
  ``max_tokens`` = ``min_tokens`` = the output length and ``ignore_eos``, ``stream``
  with usage (``stream_options.include_usage``)
  and ``return_token_ids`` (vLLM ≥ 0.10.2 then puts the chunk's new ids in
  ``choices[0].token_ids``, ``serving_completion.py``; other servers ignore the field;
  ``extra_body`` ``{"return_token_ids": false}`` drops it). The reply is server-sent
  events ``data: {...}`` ending in ``data: [DONE]``.
* ``sglang``: SGLang's native ``POST /generate`` with ``input_ids`` and
  ``sampling_params`` (``max_new_tokens``, ``min_new_tokens``, ``ignore_eos``); each
  event's ``meta_info.completion_tokens`` counts the tokens so far, so a chunk carries
  as many tokens as that count grew by.

Counting (``openai``, decided when the stream ends, :attr:`Outcome.counted_by`):

1. ``token_ids``: some chunk has a ``token_ids`` list; a chunk carries as many tokens as
   it lists (several under speculative decoding; an empty list carries none).
2. ``text``: no ids; a chunk whose ``choices[0].text`` is not empty carries one token
   (vLLM ``benchmarks/backend_request_func.py``; llama.cpp's last chunk has empty text
   and no token).
3. ``chunks``: the text count disagrees with ``usage.completion_tokens`` but the number
   of choice chunks equals it: empty texts carried tokens too (vLLM with
   ``--skip-tokenizer-init`` streams ``text: ""``; a token can decode to nothing yet).
4. ``usage``: usage disagrees with every reading of the stream. The count is usage's
   (:attr:`Outcome.stream_tokens` keeps the stream's); the request's chunk times still
   bound TTFT and E2E, but which chunks carried which tokens is unknown, so its gaps
   are left out of the pooled ITLs (:attr:`Outcome.itl_known` is false).

A stream that carries no countable token ends with ``error`` ``no tokens (...)``.

Timing (``time.perf_counter``, seconds from the caller's origin): the send time is taken
just before the request is written; TTFT ends at the first token-carrying chunk; the
ITLs are the gaps between token-carrying chunks. Every failure ends in an
:class:`Outcome` with ``error`` set, never an exception: ``HTTP <code>``, ``timeout
after <s> s``, ``malformed chunk``, ``connection dropped``, ``connection failed``,
``stream ended early``, ``no tokens (...)``. One connection per request (keep-alive off): reusing
connections raced with the server closing them under load (VALIDATION-NOTES).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import ssl
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Api = Literal["openai", "sglang"]
APIS: tuple[Api, ...] = ("openai", "sglang")


@dataclass(slots=True)
class Outcome:
    """What came back for one request; times in seconds from the caller's origin."""

    sent_s: float
    chunk_s: list[float] = field(default_factory=list)
    """Arrival time of every token-carrying chunk."""
    chunk_tokens: list[int] | None = field(default_factory=list)
    """Tokens each of ``chunk_s`` carried (None when ``counted_by == "usage"``: which
    chunk carried which token is unknown)."""
    tokens: int = 0
    """Tokens received (chunks, or the server's running count with ``sglang``)."""
    reported_output_tokens: int | None = None
    reported_input_tokens: int | None = None
    cached_tokens: int = 0
    error: str | None = None
    timings: dict[str, Any] | None = None
    """The engine's own timings when it reports them (llama.cpp ``timings``)."""
    done_s: float | None = None
    """When the stream ended cleanly."""
    counted_by: str | None = None
    """How ``tokens`` was counted: ``token_ids``, ``text``, ``chunks``, ``usage`` (module
    docstring) or ``meta_info`` (``sglang``)."""
    stream_tokens: int | None = None
    """With ``counted_by == "usage"``: the count the stream itself showed (its choice
    chunks when none had text or ids)."""
    seen: list[tuple[float, int | None, bool]] = field(default_factory=list)
    """Every choice chunk (``openai``): arrival time, ``len(token_ids)`` (None without
    ids), and whether its text was non-empty."""

    @property
    def itl_known(self) -> bool:
        """Whether the gaps between ``chunk_s`` are gaps between token-carrying chunks."""
        return self.counted_by != "usage"


def request_body(
    api: Api, prompt_ids: list[int], output_tokens: int, extra: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """URL path and JSON body asking for exactly *output_tokens* tokens."""
    if api == "sglang":
        body: dict[str, Any] = {
            "input_ids": prompt_ids,
            "sampling_params": {
                "max_new_tokens": output_tokens,
                "min_new_tokens": output_tokens,
                "ignore_eos": True,
            },
            "stream": True,
        }
        path = "/generate"
    else:
        body = {
            "model": "default",
            "prompt": prompt_ids,
            "max_tokens": output_tokens,
            "min_tokens": output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        }
        path = "/v1/completions"
    body.update(extra or {})
    return path, body


class _MalformedError(Exception):
    pass


def _on_event(api: Api, event: dict[str, Any], out: Outcome, now_s: float) -> bool:
    """Account one decoded event into *out*; True when it may carry a token."""
    if not isinstance(event, dict):
        raise _MalformedError
    if isinstance(event.get("timings"), dict):
        out.timings = event["timings"]
    if api == "sglang":
        meta = event.get("meta_info")
        if not isinstance(meta, dict) or not isinstance(meta.get("completion_tokens"), int):
            raise _MalformedError
        grew: int = meta["completion_tokens"] - out.tokens
        if grew > 0:
            out.chunk_s.append(now_s)
            if out.chunk_tokens is not None:
                out.chunk_tokens.append(grew)
            out.tokens += grew
        out.counted_by = "meta_info"
        out.reported_output_tokens = meta["completion_tokens"]
        if isinstance(meta.get("prompt_tokens"), int):
            out.reported_input_tokens = meta["prompt_tokens"]
        out.cached_tokens = int(meta.get("cached_tokens") or 0)
        return grew > 0
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise _MalformedError
    carries = False
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise _MalformedError
        ids, text = choice.get("token_ids"), choice.get("text")
        if (ids is not None and not isinstance(ids, list)) or (
            text is not None and not isinstance(text, str)
        ):
            raise _MalformedError
        n_ids = None if ids is None else len(ids)
        out.seen.append((now_s, n_ids, bool(text)))
        carries = n_ids is None or n_ids > 0
    usage = event.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("completion_tokens"), int):
            out.reported_output_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            out.reported_input_tokens = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            out.cached_tokens = details["cached_tokens"]
    return carries


def settle(out: Outcome) -> None:
    """Decide, once the stream has ended, which ``openai`` chunks carried how many
    tokens (module docstring: counting); set ``error`` when none did."""
    if out.counted_by == "meta_info":
        return
    seen, usage = out.seen, out.reported_output_tokens
    kept: list[tuple[float, int]]
    if any(n is not None for _, n, _ in seen):
        kept, how = [(t, n) for t, n, _ in seen if n], "token_ids"
    else:
        kept, how = [(t, 1) for t, _, has_text in seen if has_text], "text"
        if usage is not None and len(kept) != usage and len(seen) == usage:
            kept, how = [(t, 1) for t, _, _ in seen], "chunks"
    out.chunk_s = [t for t, _ in kept]
    out.chunk_tokens = [n for _, n in kept]
    out.tokens = sum(n for _, n in kept)
    out.counted_by = how
    if out.error is not None:
        return
    if usage is not None and usage != out.tokens and usage > 0:
        if not out.chunk_s:  # no chunk read as a token: read every choice chunk as one
            out.chunk_s, out.tokens = [t for t, _, _ in seen], len(seen)
        out.stream_tokens, out.tokens, out.counted_by = out.tokens, usage, "usage"
        out.chunk_tokens = None
    if out.tokens == 0 or not out.chunk_s:
        out.chunk_s, out.chunk_tokens, out.tokens = [], [], 0
        out.error = (
            f"no tokens ({len(seen)} choice chunks, none with text or token_ids; "
            f"usage.completion_tokens: {usage})"
        )


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    api: Api,
    out: Outcome,
    t0: float,
    first: asyncio.Event | None,
) -> None:
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            out.error = f"HTTP {resp.status_code}"
            return
        async for line in resp.aiter_lines():
            now_s = time.perf_counter() - t0
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == "[DONE]":
                out.done_s = now_s
                return
            try:
                carries = _on_event(api, json.loads(data), out, now_s)
            except (ValueError, _MalformedError):
                out.error = "malformed chunk"
                return
            if first is not None and carries:
                first.set()
    if out.done_s is None:
        out.error = "stream ended early"


async def send(
    client: httpx.AsyncClient,
    base_url: str,
    api: Api,
    prompt_ids: list[int],
    output_tokens: int,
    timeout_s: float,
    t0: float,
    extra: dict[str, Any] | None = None,
    first: asyncio.Event | None = None,
) -> Outcome:
    """Send one request and time its stream (times from *t0*, a ``perf_counter`` value);
    *first* is set when its first token arrives."""
    path, body = request_body(api, prompt_ids, output_tokens, extra)
    out = Outcome(sent_s=time.perf_counter() - t0)
    try:
        await asyncio.wait_for(
            _stream(client, base_url + path, body, api, out, t0, first), timeout_s
        )
    except asyncio.TimeoutError:
        out.error = f"timeout after {timeout_s:g} s"
    except httpx.ConnectError:
        out.error = "connection failed"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        out.error = "connection dropped"
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}"
    settle(out)
    return out


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """The TLS context every client shares (httpx's default: the system's defaults with
    certifi's CA bundle). Each ``httpx.AsyncClient`` would otherwise build its own:
    40-80 ms of CPU on the 2-core validation hosts, taken from the engine being timed
    when a probe made one per request (``docs/VALIDATION-llamacpp.md``, item 13)."""
    import certifi  # (httpx's own dependency)

    return ssl.create_default_context(cafile=certifi.where())


def new_client() -> httpx.AsyncClient:
    """An HTTP client that opens one connection per request (no keep-alive, no
    per-operation timeout: :func:`send` bounds the whole request); cheap to make (the TLS
    context is shared, :func:`shared_tls`)."""
    return httpx.AsyncClient(
        verify=shared_tls(),
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        headers={"Connection": "close"},
    )


def decode_step_ms(
    base_url: str,
    prompt_ids: list[int],
    output_tokens: int = 33,
    api: Api = "openai",
    extra: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> float | None:
    """One request alone, timed: the median gap between its streamed tokens (ms), the
    server's batch-1 decode step as a client sees it right now (None when the request
    failed or streamed fewer than two token chunks). Validation runs take it before and
    after each real run, to see whether the machine ran at the speed it was profiled at
    (``validation/validate_vllm_cpu.py``)."""

    async def one() -> Outcome:
        async with new_client() as client:
            t0 = time.perf_counter()
            return await send(client, base_url, api, prompt_ids, output_tokens, timeout_s, t0,
                              extra)  # fmt: skip

    out = asyncio.run(one())
    if out.error is not None or len(out.chunk_s) < 2:
        return None
    return round(median_gap_ms([out]), 2)


def lockstep_step_ms(outs: list[Outcome], gap_ms: float | None = None) -> float:
    """The mean engine step (ms) while every request of *outs* decodes: requests sent
    together, each streaming one token a step once its prompt is in. The window opens
    at the last request's first chunk (every prompt is in: each step after it is a
    decode of them all) and closes at the first request's last chunk; each request's
    chunks inside it give its steps (tokens after its first chunk in the window) and
    their span, pooled over the requests. A chunk belongs to a step within half the
    median gap of the step's time (the tokens of one step reach the client a few ms
    apart; *gap_ms*: that median when the caller has it). Falls back to the median gap
    when the window holds fewer than two chunks of any request, or when a chunk's token
    count is unknown."""
    gap = median_gap_ms(outs) if gap_ms is None else gap_ms
    if any(out.chunk_tokens is None or len(out.chunk_s) < 2 for out in outs):
        return gap
    slack = gap / 2000.0
    opens = max(out.chunk_s[0] for out in outs) + slack
    closes = min(out.chunk_s[-1] for out in outs) + slack
    span = steps = 0.0
    for out in outs:
        tokens = out.chunk_tokens or []
        inside = [k for k, t in enumerate(out.chunk_s) if opens - 2 * slack < t <= closes]
        if len(inside) < 2:
            return gap
        span += out.chunk_s[inside[-1]] - out.chunk_s[inside[0]]
        steps += sum(tokens[k] for k in inside[1:])
    return 1000.0 * span / steps


def median_gap_ms(outs: list[Outcome]) -> float:
    """The median gap (ms) between consecutive token chunks over every request of *outs*
    (each needs two chunks or more): a decode step as the client sees it."""
    return statistics.median(
        1000.0 * (b - a) for out in outs for a, b in itertools.pairwise(out.chunk_s)
    )


def check_endpoint(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Fail fast when nothing answers at *base_url*; return llama.cpp's ``/props``
    (engine build and settings) when the server has it; else, from ``/v1/models``, the
    engine (``owned_by``: ``vllm``), the model (``root``, else ``id``), its
    ``max_model_len`` and the engine's ``/version`` (vLLM) where they are given; else
    ``{}``."""
    from lyra_simpy.errors import LyraError

    try:
        with httpx.Client(timeout=timeout_s) as client:
            for probe in ("/props", "/get_server_info", "/v1/models"):
                resp = client.get(base_url + probe)
                if resp.status_code == 200 and probe != "/v1/models":
                    data = resp.json()
                    return data if isinstance(data, dict) else {}
                if resp.status_code == 200:
                    return _models_info(client, base_url, resp.json())
    except (httpx.HTTPError, ValueError) as exc:
        raise LyraError(f"endpoint {base_url}: unreachable ({type(exc).__name__}: {exc})") from None
    return {}


def _models_info(client: httpx.Client, base_url: str, data: Any) -> dict[str, Any]:
    """What ``/v1/models`` (and vLLM's ``/version``) say about the served model."""
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models or not isinstance(models[0], dict):
        return {}
    model = models[0]
    info: dict[str, Any] = {}
    if isinstance(model.get("owned_by"), str):
        info["engine"] = model["owned_by"]
    name = model.get("root") or model.get("id")
    if isinstance(name, str):
        info["model"] = name
    if isinstance(model.get("max_model_len"), int):
        info["max_model_len"] = model["max_model_len"]
    try:
        resp = client.get(base_url + "/version")
        version = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        version = None
    if isinstance(version, str):
        info["version"] = version
    return info


def engine_info(endpoint: str, api: Api, props: dict[str, Any]) -> dict[str, Any]:
    """What the manifest says about a live endpoint: engine, version, model and flags
    (llama.cpp's ``/props``: build, slots, context, generation settings)."""
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else props.get("max_model_len")
    build = props.get("build_info")
    return {
        "endpoint": endpoint,
        "api": api,
        "engine": "llama.cpp" if build is not None else props.get("engine", "unknown"),
        "version": build if build is not None else props.get("version", "unknown"),
        "model": props.get("model_path", props.get("model", "unknown")),
        "flags": {"total_slots": props.get("total_slots"), "n_ctx": n_ctx},
        "props": props,
    }
