"""One streamed request to a live serving endpoint, timed as vLLM's benchmark times it.

Two wire formats (``api``):

* ``openai``: ``POST /v1/completions`` with the prompt as an array of token ids (SGLang,
  vLLM and llama.cpp's server accept it), ``max_tokens`` = ``min_tokens`` = the output
  length and ``ignore_eos``, ``stream`` with usage; the reply is server-sent events
  ``data: {...}`` ending in ``data: [DONE]``. A chunk whose ``choices[0].text`` is not
  empty carries a token (vLLM ``benchmarks/backend_request_func.py``).
* ``sglang``: SGLang's native ``POST /generate`` with ``input_ids`` and
  ``sampling_params`` (``max_new_tokens``, ``min_new_tokens``, ``ignore_eos``); each
  event's ``meta_info.completion_tokens`` counts the tokens so far, so a chunk carries
  as many tokens as that count grew by.

Timing (``time.perf_counter``, seconds from the caller's origin): the send time is taken
just before the request is written; TTFT ends at the first token-carrying chunk; the
ITLs are the gaps between token-carrying chunks. Every failure ends in an
:class:`Outcome` with ``error`` set, never an exception: ``HTTP <code>``, ``timeout
after <s> s``, ``malformed chunk``, ``connection dropped``, ``connection failed``,
``stream ended early``. One connection per request (keep-alive off): reusing
connections raced with the server closing them under load (VALIDATION-NOTES).
"""

from __future__ import annotations

import asyncio
import json
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
        }
        path = "/v1/completions"
    body.update(extra or {})
    return path, body


class _MalformedError(Exception):
    pass


def _on_event(api: Api, event: dict[str, Any], out: Outcome, now_s: float) -> None:
    """Account one decoded event into *out*."""
    if not isinstance(event, dict):
        raise _MalformedError
    if isinstance(event.get("timings"), dict):
        out.timings = event["timings"]
    if api == "sglang":
        meta = event.get("meta_info")
        if not isinstance(meta, dict) or not isinstance(meta.get("completion_tokens"), int):
            raise _MalformedError
        grew = meta["completion_tokens"] - out.tokens
        if grew > 0:
            out.chunk_s.append(now_s)
            out.tokens += grew
        out.reported_output_tokens = meta["completion_tokens"]
        if isinstance(meta.get("prompt_tokens"), int):
            out.reported_input_tokens = meta["prompt_tokens"]
        out.cached_tokens = int(meta.get("cached_tokens") or 0)
        return
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise _MalformedError
    if choices and isinstance(choices[0], dict) and choices[0].get("text"):
        out.chunk_s.append(now_s)
        out.tokens += 1
    usage = event.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("completion_tokens"), int):
            out.reported_output_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            out.reported_input_tokens = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            out.cached_tokens = details["cached_tokens"]


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
                _on_event(api, json.loads(data), out, now_s)
            except (ValueError, _MalformedError):
                out.error = "malformed chunk"
                return
            if first is not None and out.chunk_s:
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
    return out


def new_client() -> httpx.AsyncClient:
    """An HTTP client that opens one connection per request (no keep-alive, no
    per-operation timeout: :func:`send` bounds the whole request)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        headers={"Connection": "close"},
    )


def check_endpoint(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Fail fast when nothing answers at *base_url*; return llama.cpp's ``/props``
    (engine build and settings) when the server has it, else ``{}``."""
    from lyra_simpy.errors import LyraError

    try:
        with httpx.Client(timeout=timeout_s) as client:
            for probe in ("/props", "/get_server_info", "/v1/models"):
                resp = client.get(base_url + probe)
                if resp.status_code == 200 and probe != "/v1/models":
                    data = resp.json()
                    return data if isinstance(data, dict) else {}
                if resp.status_code == 200:
                    return {}
    except (httpx.HTTPError, ValueError) as exc:
        raise LyraError(f"endpoint {base_url}: unreachable ({type(exc).__name__}: {exc})") from None
    return {}


def engine_info(endpoint: str, api: Api, props: dict[str, Any]) -> dict[str, Any]:
    """What the manifest says about a live endpoint: engine, version, model and flags
    (llama.cpp's ``/props``: build, slots, context, generation settings)."""
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
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
