"""``validation/llamacpp_steps.py --by-batch``: the real runs' decode-only steps by
sequences and passes, without a fit."""

from __future__ import annotations

import numpy as np

from builders import validation_module
from lyra_simpy.calibration.steps import Steps

steps_script = validation_module("llamacpp_steps")


def _steps(decode_seqs, prefill_seqs, passes, latency_ms) -> Steps:
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
        checkpoints=zeros,
        output_passes=ints(passes),
        run=np.asarray(["r"] * n),
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
