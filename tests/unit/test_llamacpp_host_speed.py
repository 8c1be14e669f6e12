"""validation/llamacpp_host_speed.py: each load's real decode steps against the probe fit,
beside the speed gate's readings around its runs (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module

host_speed = validation_module("llamacpp_host_speed")


def _load(readings: list[tuple[float, float]], decode_mean: float) -> dict[str, object]:
    return {
        "machine": [{"step_before": b, "step_after": a} for b, a in readings],
        "steps_vs_fit": {"decode_mean": decode_mean},
    }


MATRIX = {
    "facts": {},
    "results": {
        "kvu/long": {
            "gate": {"run_ref_ms": 20.0},
            "loads": {
                "poisson_0.3": _load([(20.0, 20.4), (19.6, 20.0)], 0.99),
                "closed_8": _load([(22.0, 22.4), (22.2, 22.2)], 1.10),
                "closed_4": _load([], 1.05),  # no reading: left out
            },
        },
        "default/short": {"gate": {}, "loads": {"poisson_0.3": _load([(21.0, 21.0)], 1.0)}},
    },
}


def test_pairs_put_the_hosts_speed_beside_the_steps_ratio():
    got = host_speed.pairs(MATRIX)
    assert [(k, load) for k, load, _, _ in got] == [
        ("kvu/long", "poisson_0.3"),
        ("kvu/long", "closed_8"),
    ]  # a point without a gated speed and a load without readings are left out
    assert got[0][2:] == pytest.approx((1.0, 0.99))
    assert got[1][2:] == pytest.approx((1.11, 1.10))


def test_main_prints_the_correlation(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    matrix = json.loads(json.dumps(MATRIX))
    matrix["results"]["kvu/long"]["loads"]["poisson_0.6"] = _load([(21.0, 21.0)], 1.04)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(matrix))
    assert host_speed.main([str(path)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("3 loads: host 1.000-1.110 x the gated speed")
    assert last.endswith("correlation 1.00")  # (1.00, 0.99), (1.05, 1.04), (1.11, 1.10)
    empty = tmp_path / "e.json"
    empty.write_text(json.dumps({"facts": {}, "results": {}}))
    assert host_speed.main([str(empty)]) == 1
