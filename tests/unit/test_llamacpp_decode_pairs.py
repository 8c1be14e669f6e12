"""``validation/llamacpp_decode_pairs.py``: the window in which two requests decode
together, and every case of the measurement against a stand-in server."""

from __future__ import annotations

import asyncio

import pytest

from builders import validation_module
from live_server import StreamServer
from lyra_simpy.live.client import Outcome

pairs = validation_module("llamacpp_decode_pairs")


def test_pair_gaps_are_the_first_requests_gaps_while_both_decode():
    # a streams every 10 ms from 0.10 s; b's first token at 0.135 s, its last at 0.175 s
    a = Outcome(sent_s=0.0, chunk_s=[0.10 + 0.01 * k for k in range(12)])
    b = Outcome(sent_s=0.0, chunk_s=[0.135, 0.155, 0.175])
    gaps = pairs.pair_gaps(a, b)
    # a's tokens inside (0.135, 0.175]: 0.14 .. 0.17, so three gaps of 10 ms
    assert gaps == pytest.approx([10.0, 10.0, 10.0])
    assert pairs.pair_gaps(b, a) == pytest.approx([20.0])


def test_pair_gaps_is_empty_when_the_requests_never_overlap():
    a = Outcome(sent_s=0.0, chunk_s=[0.1, 0.2])
    b = Outcome(sent_s=0.0, chunk_s=[0.3, 0.4])
    assert pairs.pair_gaps(a, b) == []


def test_every_case_is_measured_against_a_streaming_server(monkeypatch):
    monkeypatch.setattr(pairs, "PAUSE_S", 0.0)
    monkeypatch.setattr(pairs, "STAGGER_S", 0.0)  # the first streams 48 tokens more
    with StreamServer(ttft_s=0.01, itl_s=0.004) as srv:
        got = asyncio.run(pairs.measure(srv.url, ctx=8, n_out=24, repeats=1))
    assert set(got) == set(pairs.CASES)
    for case, values in got.items():
        assert len(values) == 1, case
        # a step was measured (the stand-in streams a token every 4 ms; how close the
        # median comes to it depends on this machine's load: not asserted)
        assert values[0] > 0.0, case
