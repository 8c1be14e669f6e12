"""The streaming client against the in-process server: timings, counts and faults."""

from __future__ import annotations

import asyncio
import time

import pytest

from live_server import StreamServer
from lyra_simpy.live.client import Api, Outcome, new_client, send


def _send(url: str, api: Api, n: int = 5, timeout_s: float = 5.0) -> Outcome:
    async def go() -> Outcome:
        client = new_client()
        try:
            return await send(client, url, api, [11, 12, 13], n, timeout_s, time.perf_counter())
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("api", ["openai", "sglang"])
def test_clean_stream_counts_every_token_and_times_the_first(api: Api) -> None:
    with StreamServer(ttft_s=0.05, itl_s=0.01) as srv:
        out = _send(srv.url, api)
        body = srv.received[0]
    assert out.error is None
    assert out.tokens == 5
    assert out.reported_output_tokens == 5
    assert out.reported_input_tokens == 3
    assert len(out.chunk_s) == 5
    assert out.chunk_s[0] - out.sent_s >= 0.05
    assert out.done_s is not None
    if api == "openai":
        assert body["prompt"] == [11, 12, 13]
        assert body["max_tokens"] == body["min_tokens"] == 5
        assert body["ignore_eos"] is True
    else:
        assert body["input_ids"] == [11, 12, 13]
        assert body["sampling_params"]["max_new_tokens"] == 5


def test_slow_first_token_shows_in_ttft_only() -> None:
    with StreamServer(ttft_s=0.01, itl_s=0.005, slow_first_s=0.2) as srv:
        srv.faults = {0: "slow_first"}
        out = _send(srv.url, "openai")
    assert out.error is None
    assert out.chunk_s[0] - out.sent_s >= 0.2
    assert max(b - a for a, b in zip(out.chunk_s, out.chunk_s[1:], strict=False)) < 0.15


@pytest.mark.parametrize(
    ("fault", "error", "tokens"),
    [
        ("http500", "HTTP 500", 0),
        ("malformed", "malformed chunk", 1),
        ("drop", "connection dropped", 2),
        ("hang", "timeout after 0.3 s", 0),
    ],
)
@pytest.mark.parametrize("api", ["openai", "sglang"])
def test_faults_end_in_an_error_not_an_exception(
    api: Api, fault: str, error: str, tokens: int
) -> None:
    with StreamServer() as srv:
        srv.faults = {0: fault}
        out = _send(srv.url, api, timeout_s=0.3)
    assert out.error == error
    assert out.tokens == tokens


def test_unreachable_endpoint_is_a_connection_failure() -> None:
    out = _send("http://127.0.0.1:9", "openai")
    assert out.error == "connection failed"
