"""The streaming client against the in-process server: timings, counts and faults."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from live_server import StreamServer
from lyra_simpy.live.client import Api, Outcome, new_client, send


def _send(
    url: str,
    api: Api,
    n: int = 5,
    timeout_s: float = 5.0,
    extra: dict[str, Any] | None = None,
) -> Outcome:
    body = {"model": "tiny", **(extra or {})}  # the stand-in's served name (vLLM 404s others)

    async def go() -> Outcome:
        client = new_client()
        try:
            return await send(
                client, url, api, [11, 12, 13], n, timeout_s, time.perf_counter(), body
            )
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
        assert body["return_token_ids"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert out.counted_by == "text"
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


@pytest.mark.parametrize(
    ("per_chunk", "extra", "counted_by", "chunks"),
    [
        (1, None, "token_ids", 5),  # ids asked for and streamed
        (2, None, "token_ids", 3),  # several ids per chunk (speculative decoding)
        (1, {"return_token_ids": False}, "chunks", 5),  # text "" only: usage confirms
    ],
)
def test_vllm_empty_text_streams_are_counted(
    per_chunk: int, extra: dict[str, Any] | None, counted_by: str, chunks: int
) -> None:
    with StreamServer(style="vllm", tokens_per_chunk=per_chunk) as srv:
        out = _send(srv.url, "openai", extra=extra)
    assert out.error is None
    assert (out.tokens, out.counted_by, len(out.chunk_s)) == (5, counted_by, chunks)
    assert out.itl_known
    assert out.chunk_s == sorted(out.chunk_s)


def test_usage_wins_when_no_reading_of_the_stream_matches_it() -> None:
    # Two tokens per chunk, no ids, empty text: 3 chunks, usage says 5.
    with StreamServer(style="vllm", tokens_per_chunk=2) as srv:
        out = _send(srv.url, "openai", extra={"return_token_ids": False})
    assert out.error is None
    assert (out.tokens, out.counted_by, out.stream_tokens) == (5, "usage", 3)
    assert len(out.chunk_s) == 3  # still bound TTFT and E2E
    assert not out.itl_known


def test_usage_that_disagrees_with_the_text_count_is_used_and_said() -> None:
    with StreamServer() as srv:
        srv.faults = {0: "usage_plus_2"}
        out = _send(srv.url, "openai")
    assert (out.tokens, out.counted_by, out.stream_tokens) == (7, "usage", 5)


def test_llamacpp_trailing_empty_chunk_is_not_a_token() -> None:
    with StreamServer() as srv:
        srv.faults = {0: "trailing_empty"}
        out = _send(srv.url, "openai")
    assert (out.error, out.tokens, out.counted_by, len(out.chunk_s)) == (None, 5, "text", 5)


@pytest.mark.parametrize(
    ("style", "fault", "extra"),
    [
        ("text", "no_tokens", None),  # [DONE] with nothing before it
        ("vllm", "no_tokens", None),
        ("vllm", "no_usage", {"return_token_ids": False}),  # "" chunks, nothing to check
    ],
)
def test_a_stream_without_a_countable_token_is_an_error(
    style: str, fault: str, extra: dict[str, Any] | None
) -> None:
    with StreamServer(style=style) as srv:
        srv.faults = {0: fault}
        out = _send(srv.url, "openai", extra=extra)
    assert out.error is not None
    assert out.error.startswith("no tokens (")
    assert (out.tokens, out.chunk_s) == (0, [])


def test_token_ids_that_are_not_a_list_are_a_malformed_chunk() -> None:
    with StreamServer(style="vllm") as srv:
        srv.faults = {0: "bad_ids"}
        out = _send(srv.url, "openai")
    assert out.error == "malformed chunk"


def test_decode_step_is_the_median_gap_of_one_lone_request() -> None:
    from lyra_simpy.live.client import decode_step_ms

    with StreamServer(ttft_s=0.05, itl_s=0.03, style="vllm") as srv:
        step = decode_step_ms(srv.url, [11, 12, 13], 9, extra={"model": "tiny"})
        srv.faults[1] = "http500"
        failed = decode_step_ms(srv.url, [11, 12, 13], 9, extra={"model": "tiny"})
    assert step is not None
    assert 30.0 <= step < 60.0  # the 30 ms the server sleeps between tokens, not its TTFT
    assert failed is None


def _stream(times: list[float], tokens: list[int] | None = None) -> Outcome:
    return Outcome(sent_s=0.0, chunk_s=times, chunk_tokens=tokens or [1] * len(times))


def test_lockstep_step_is_the_mean_of_the_window_where_all_decode() -> None:
    from lyra_simpy.live.client import lockstep_step_ms, median_gap_ms

    # Two requests sent together. A's prompt is in at 100 ms; B's prompt takes the
    # next step (A's token at 130, B's first at 131). From then on both decode in
    # lock-step: steps of 20 ms, one of them slow (50 ms), tokens reaching the client
    # 1 ms apart. A's last chunk (250) closes the window; B streams one more.
    a = _stream([0.100, 0.130, 0.150, 0.170, 0.220, 0.240, 0.250])
    b = _stream([0.131, 0.151, 0.171, 0.221, 0.241, 0.251, 0.271])
    # the window: 130/131 -> 250/251, 5 steps (20 + 20 + 50 + 20 + 10) = 120 ms each
    assert lockstep_step_ms([a, b]) == pytest.approx(24.0)
    assert median_gap_ms([a, b]) == pytest.approx(20.0)  # the slow step dropped


def test_lockstep_step_counts_a_chunk_of_two_tokens_as_two_steps() -> None:
    from lyra_simpy.live.client import lockstep_step_ms

    a = _stream([0.100, 0.120, 0.160, 0.180], [1, 1, 2, 1])
    assert lockstep_step_ms([a]) == pytest.approx(20.0)  # 80 ms over 4 tokens


def test_lockstep_step_falls_back_to_the_median_gap_without_token_counts() -> None:
    from lyra_simpy.live.client import lockstep_step_ms

    a = Outcome(sent_s=0.0, chunk_s=[0.1, 0.12, 0.19, 0.21], chunk_tokens=None)
    assert lockstep_step_ms([a]) == pytest.approx(20.0)
