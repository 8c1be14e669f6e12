"""validation/speed_gate.py: profile at the host's quickest, runs at the profile's speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import validation_module


def _gate() -> Any:
    return validation_module("speed_gate")


def _profile(path: Path, batch1_ms: list[float]) -> Path:
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms"]
    rows += [f"decode,1,0,{100 * (k + 1)},{ms}" for k, ms in enumerate(batch1_ms)]
    rows.append("decode,2,0,100,99.0")  # not batch 1: not read
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_profile_step_is_the_median_of_its_batch_1_rows(tmp_path: Path) -> None:
    gate = _gate()
    assert gate.profile_step(_profile(tmp_path / "p.csv", [20.0, 24.0, 22.0])) == 22.0
    assert gate.profile_step(tmp_path / "missing.csv") is None


def test_a_profile_taken_off_the_floor_is_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate()
    monkeypatch.setattr(gate.time, "sleep", lambda s: None)
    probes = iter([30.0, 20.0, None, 26.0, 25.0, 21.0] + [20.5] * 10)
    taken: list[float] = []
    steps = iter([30.0, 21.0])  # the first profile ran slow (30 vs 20: > 15 %)

    def take() -> Path:
        taken.append(next(steps))
        return _profile(tmp_path / "p.csv", [taken[-1]])

    out = gate.profile_at_floor(lambda: next(probes), take, "test")
    assert out["floor_ms"] == 20.0  # the quickest of the 6 floor probes
    assert out["floor_probes_ms"] == [30.0, 20.0, None, 26.0, 25.0, 21.0]
    assert out["profile_tries"] == 2
    assert out["profile_step_ms"] == 21.0
    assert taken == [30.0, 21.0]


def test_a_given_floor_replaces_the_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _gate()
    monkeypatch.setattr(gate.time, "sleep", lambda s: None)
    out = gate.profile_at_floor(
        lambda: 40.0, lambda: _profile(tmp_path / "p.csv", [41.0]), "test", floor=40.0
    )
    assert (out["floor_probes_ms"], out["profile_tries"], out["profile_step_ms"]) == ([], 1, 41.0)


def test_with_a_probe_check_the_runs_wait_for_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The llama.cpp matrix's profile decodes batch 1 at longer contexts than the probe:
    the speed after the profile is a probe, and the runs' reference is the floor."""
    gate = _gate()
    monkeypatch.setattr(gate.time, "sleep", lambda s: None)
    probes = iter([20.0, 28.0, 20.0, 20.5])  # wait, after (slow), wait, after
    out = gate.profile_at_floor(
        lambda: next(probes),
        lambda: _profile(tmp_path / "p.csv", [27.0]),  # its rows: slower by their context
        "test",
        floor=20.0,
        check="probe",
    )
    assert out["profile_tries"] == 2  # the probe after the first profile read 28
    assert (out["probe_after_profile_ms"], out["run_ref_ms"]) == (20.5, 20.0)
    assert out["profile_step_ms"] == 27.0


def test_one_try_keeps_a_profile_taken_off_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile that prices its rows against references beside them
    (``grid.speed_reference``) is not taken again when the host ran slower."""
    gate = _gate()
    monkeypatch.setattr(gate.time, "sleep", lambda s: None)
    taken: list[Path] = []

    def take() -> Path:
        taken.append(_profile(tmp_path / "p.csv", [27.0]))
        return taken[-1]

    probes = iter([20.0, 28.0])  # the wait, then the probe after: 40 % slow
    out = gate.profile_at_floor(
        lambda: next(probes), take, "test", floor=20.0, check="probe", tries=1
    )
    assert len(taken) == 1
    assert out["profile_tries"] == 1
    assert out["probe_after_profile_ms"] == 28.0


def test_the_matrix_grid_asks_for_the_reference_only_when_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lyra_simpy.live.profile_grid import ProfileGrid

    matrix = validation_module("llamacpp_matrix")
    flags, regime = matrix.CONFIGS["default"], matrix.REGIMES["long"]
    assert "speed_reference" not in matrix.grid(flags, regime)
    monkeypatch.setattr(matrix, "SPEED_REFERENCE", "record")
    grid = ProfileGrid.model_validate(matrix.grid(flags, regime))
    assert grid.speed_reference == "record"
    assert grid.speed_reference_context == 32  # the gate's lone request
