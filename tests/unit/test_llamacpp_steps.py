"""``validation/llamacpp_steps.py --by-batch``: the real runs' decode-only steps by
sequences and passes, without a fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from builders import validation_module
from lyra_simpy.calibration.steps import Steps

steps_script = validation_module("llamacpp_steps")


def _steps(decode_seqs, prefill_seqs, passes, latency_ms, arrivals=None, checkpoints=None):
    n = len(latency_ms)
    ints = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    zeros = ints([0] * n)
    return Steps(
        latency_ms=np.asarray(latency_ms, dtype=np.float64),
        steps=ints([1] * n),
        decode_seqs=ints(decode_seqs),
        decode_context_tokens=zeros,
        prefill_seqs=ints(prefill_seqs),
        prefill_tokens=zeros,
        prefill_attention_tokens=zeros,
        prefill_attention_cells=zeros,
        prefill_computed_cells=zeros,
        passes=ints(passes),
        checkpoints=zeros if checkpoints is None else ints(checkpoints),
        output_passes=ints(passes),
        pass_rows=np.zeros((n, 0), dtype=np.int64),
        arrivals=zeros if arrivals is None else ints(arrivals),
        run=np.asarray(["r"] * n),
        end_s=np.cumsum(np.asarray(latency_ms, dtype=np.float64)) / 1000.0,
    )


def test_decode_only_steps_are_grouped_by_sequences_and_passes():
    k = steps_script.MIN_STEPS
    steps = _steps(
        # k steps of 1 sequence, k of 2 in one pass, k of 2 in two passes, k - 1 of 4,
        # and k steps that carry a prompt (left out)
        decode_seqs=[1] * k + [2] * k + [2] * k + [4] * (k - 1) + [1] * k,
        prefill_seqs=[0] * (4 * k - 1) + [1] * k,
        passes=[1] * k + [1] * k + [2] * k + [1] * (k - 1) + [1] * k,
        latency_ms=[14.0 + 0.1 * i for i in range(k)]
        + [28.0] * k
        + [30.0] * (k - 1)
        + [99.0]
        + [40.0] * (k - 1)
        + [500.0] * k,
    )
    got = steps_script.decode_by_batch(steps)
    # too few steps of 4 sequences: not printed
    assert set(got) == {(1, 1), (2, 1), (2, 2)}
    assert got[1, 1] == (np.median([14.0 + 0.1 * i for i in range(k)]), k)
    assert got[2, 1] == (28.0, k)
    # a median: the one slow step of two passes does not move it
    assert got[2, 2] == (30.0, k)


def test_steps_are_split_by_arrivals_and_checkpoints():
    # decode-only without an arrival (3), with one (2), a prompt's launch step (2) and
    # its checkpoint step (1); each kind's median of measured / predicted
    steps = _steps(
        decode_seqs=[1, 1, 1, 1, 1, 1, 1, 1],
        prefill_seqs=[0, 0, 0, 0, 0, 1, 1, 1],
        passes=[1] * 8,
        latency_ms=[1.0] * 8,
        arrivals=[0, 0, 0, 1, 2, 0, 1, 0],
        checkpoints=[0, 0, 0, 0, 0, 0, 0, 1],
    )
    ratio = np.array([1.0, 0.9, 1.1, 1.2, 1.3, 1.4, 1.6, 0.8])
    got = steps_script.arrival_split(steps, ratio)
    assert got["decode"] == (pytest.approx(1.0), 3)
    assert got["decode+arrival"] == (pytest.approx(1.25), 2)
    assert got["prompt"] == (pytest.approx(1.5), 2)
    assert got["prompt+checkpoint"] == (pytest.approx(0.8), 1)
    none = steps_script.arrival_split(_steps([1], [0], [1], [1.0]), np.array([1.0]))
    assert none["prompt"][1] == 0
    assert np.isnan(none["prompt"][0])


def test_mixed_rows_by_decoders_prompt_and_step_against_the_fit() -> None:
    # --mixed (item 77): -np 4 short's kept profile and probe fit; the rows `speed --prompt
    # 64 --beside 3` reads the host against, one per decoder context: the 60-token step at
    # context 65 sat 21 % above its twin at 17, so the reading's reference (the median of
    # the two prompts' sums, their mean) came out 7 % above the fit's price
    # (item 75's profile and fit, kept apart since item 78 ran the point again)
    point = Path(__file__).parents[2] / "docs" / "validation" / "llamacpp-default-short-item75"
    reading = json.loads((point / "speed" / "poisson_0.3" / "run1-beside.json").read_text())
    lines = steps_script.mixed_rows(point)
    assert lines[0].startswith(
        "llamacpp-default-short-item75: mixed rows by decoders, prompt and its step"
    )
    rows = {line.split()[0] + " " + line.split()[1] + " " + line.split()[2]: line
            for line in lines[1:]}  # fmt: skip
    assert len(rows) == 8  # decoders 1 and 3, prompts of 16 and 64 tokens, two steps each
    assert rows["b3 p64 s0"] == "  b3 p64 s0  124.6 (17: 112.7, 65: 136.6)  117.5  1.060"
    assert rows["b3 p64 s1"] == "  b3 p64 s1  56.0 (17: 52.4, 65: 59.6)  51.2  1.092"
    assert rows["b1 p64 s0"].endswith("0.932")
    # the reading's reference: each context's two steps summed, their median (the mean of
    # two), as the reading before the point's first run took it
    each = [[float(x.split(": ")[1]) for x in rows[f"b3 p64 s{s}"].split("(")[1].split(")")[0]
             .split(", ")] for s in (0, 1)]  # fmt: skip
    assert reading["request"] == {"batch": 1, "contexts": [64], "outputs": 1, "beside": 3}
    assert reading["profile_ms"] == pytest.approx(np.median(np.sum(each, axis=0)), abs=0.1)
