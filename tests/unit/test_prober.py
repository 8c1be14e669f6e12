"""The profiler's mixed probe timed step by step from its decoders' streams."""

from __future__ import annotations

import pytest

from lyra_simpy.errors import LyraError
from lyra_simpy.live.client import Outcome
from lyra_simpy.live.prober import prompt_step_gaps


def _decoder(chunks_ms: list[float]) -> Outcome:
    return Outcome(sent_s=0.0, chunk_s=[t / 1000.0 for t in chunks_ms])


def test_the_prompts_steps_are_the_decoders_gaps_up_to_its_first_token():
    # two decoders in lock-step (one 0.4 ms late in its reads): 10 ms decode steps, then
    # a 30 ms step (the prompt's first chunk) and a 15 ms one (its last: the probe's
    # first token comes out at 65 ms), then decodes again
    a = _decoder([0, 10, 20, 50, 65, 75, 85])
    b = _decoder([0.4, 10.4, 20.4, 50.4, 65.4, 75.4, 85.4])
    assert prompt_step_gaps([a, b], 0.0652, 2) == pytest.approx([30.0, 15.0])
    assert prompt_step_gaps([a, b], 0.0652, 3) == pytest.approx([10.0, 30.0, 15.0])
    # the median over the decoders: one decoder's late read does not move a step
    c = _decoder([0, 10, 20, 58, 65, 75, 85])
    assert prompt_step_gaps([a, b, c], 0.0652, 2) == pytest.approx([30.0, 15.0])


def test_a_decoder_without_enough_steps_before_the_probe_is_refused():
    with pytest.raises(LyraError, match=r"decoder had 1 steps before .* 2 needed"):
        prompt_step_gaps([_decoder([0, 10, 40])], 0.0101, 2)
