"""The ``grouped_bars`` figure: variants labelled ``<group>.<series>`` as clustered bars."""

from __future__ import annotations

import pytest

from lyra_simpy.output import plots
from lyra_simpy.output.writer import run_scenario
from lyra_simpy.report import FigureSpec


def test_grouped_bars_from_variant_labels(make_scenario, tmp_path, monkeypatch):
    fcfs = {"scheduler.queue_policy": "fcfs"}
    spf = {"scheduler.queue_policy": "shortest_prompt_first"}
    sc = make_scenario(
        {
            "variants": [
                {"label": "slow.fcfs", "set": fcfs},
                {"label": "slow.spf", "set": spf},
                {"label": "fast.fcfs", "set": {**fcfs, "workload.arrival.rate_per_s": 80}},
                {"label": "alone", "set": {}},
            ],
            "figures": [
                {"name": "grouped_bars", "metrics": ["fairness_jain_slowdown"]},
                {"name": "grouped_bars", "metrics": ["p99_ttft_ms", "p99_e2el_ms"], "log_y": True},
            ],
        }
    )
    seen: list[dict] = []
    real = plots.grouped_bars

    def spy(values, log_y=False, title=None):
        seen.append({"values": values, "log_y": log_y})
        return real(values, log_y, title)

    monkeypatch.setattr(plots, "grouped_bars", spy)
    run_scenario(sc, tmp_path / "out", tmp_path / "figs", echo=lambda _s: None)
    names = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert names == ["tiny_bars_fairness_jain_slowdown.png", "tiny_bars_p99_ttft.png"]
    jain = seen[0]["values"]["fairness_jain_slowdown"]
    assert list(jain) == ["slow", "fast", "alone"]  # run order
    assert list(jain["slow"]) == ["fcfs", "spf"]
    assert list(jain["alone"]) == [""]  # no dot: a group of its own
    assert all(0 < v <= 1 for by in jain.values() for v in by.values())
    assert seen[1]["log_y"] is True
    assert list(seen[1]["values"]) == ["p99_ttft_ms", "p99_e2el_ms"]


def test_grouped_bars_needs_metrics():
    with pytest.raises(ValueError, match="grouped_bars needs metrics"):
        FigureSpec(name="grouped_bars")  # refused when the scenario loads
