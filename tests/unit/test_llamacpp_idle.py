"""validation/llamacpp_idle.py: lone prompts in llama-server's log against the probes,
by the idle time before them (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builders import validation_module

idle = validation_module("llamacpp_idle")

PROFILE = """phase,batch_size,input_tokens,context_len,latency_ms
prefill,1,16,0,40.0
prefill,1,64,0,100.0
decode,1,0,24,20.0
"""


def task(t_s: float, slot: int, task_id: int, tokens: int, prompt_ms: float, end_s: float):
    def stamp(s: float) -> str:
        mins, rest = divmod(s, 60)
        secs = int(rest)
        us = round((rest - secs) * 1e6)
        return f"{int(mins)}.{secs:02d}.{us // 1000:03d}.{us % 1000:03d}"

    head = f"I slot launch_slot_: id  {slot} | task {task_id} | processing task, is_child = 0"
    timing = (
        f"I slot print_timing: id  {slot} | task {task_id} | prompt eval time =  "
        f"{prompt_ms:.2f} ms /    {tokens} tokens (    1.00 ms per token)"
    )
    release = f"I slot      release: id  {slot} | task {task_id} | stop processing: n_tokens = 9"
    return [f"{stamp(t_s)} {head}", f"{stamp(end_s)} {timing}", f"{stamp(end_s)} {release}"]


def test_lone_prompts_are_grouped_by_the_idle_time_before_them(tmp_path: Path):
    lines = [
        # the first task: no idle time known, left out
        *task(1.0, 1, 0, 16, 40.0, 1.5),
        # back to back (idle 0.05 s): as the probe (16 tokens: 40 ms)
        *task(1.55, 0, 1, 16, 41.0, 2.0),
        # after 0.5 s idle: 40 tokens (probe, interpolated: 70 ms) took 90
        *task(2.5, 1, 2, 40, 90.0, 3.0),
        # after 2 s idle, 64 tokens (probe 100 ms) took 142 ...
        *task(5.0, 0, 3, 64, 142.0, 6.0),
        # ... and a task launched while task 3 ran is not alone, nor is task 3 then
        *task(6.5, 1, 4, 16, 40.0, 7.5),
        *task(6.51, 0, 5, 16, 80.0, 7.4),
    ]
    (tmp_path / "llama-server.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "profile.csv").write_text(PROFILE)
    got = idle.excess_by_idle(tmp_path)
    assert [(name, n) for name, n, _ in got] == [
        ("0-0.1 s", 1), ("0.1-0.3 s", 0), ("0.3-1 s", 1), ("1-∞ s", 1)
    ]  # fmt: skip
    assert [ex for _, _, ex in got] == [pytest.approx(1.0), None, pytest.approx(20.0),
                                         pytest.approx(42.0)]  # fmt: skip
