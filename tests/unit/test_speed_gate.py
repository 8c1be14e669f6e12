"""validation/speed_gate.py: profile at the host's quickest, runs at the profile's speed."""

from __future__ import annotations

from collections.abc import Callable
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

    matrix, points = validation_module("llamacpp_matrix"), validation_module("llamacpp_points")
    flags, regime = points.CONFIGS["default"], points.REGIMES["long"]
    assert "speed_reference" not in matrix.grid(flags, regime)
    monkeypatch.setattr(matrix, "SPEED_REFERENCE", "record")
    grid = ProfileGrid.model_validate(matrix.grid(flags, regime))
    assert grid.speed_reference == "record"
    assert grid.speed_reference_context == 32  # the gate's lone request
    # the beside reading's own reference (item 77): NP-1 decoders and the longest mixed
    # prompt, the pair speed_before's beside reading sends
    assert grid.speed_reference_beside == (3, max(grid.mixed_prompt_tokens))
    two = ProfileGrid.model_validate(matrix.grid(points.CONFIGS["np2_b64"], regime))
    assert two.speed_reference_beside == (1, max(two.mixed_prompt_tokens))
    # the wander probe, its streams inside a slot's context at -np 4 -c 4096
    assert grid.wander_s == matrix.WANDER_S > 0
    assert min(grid.decode_context) + grid.wander_outputs <= 4096 // 4
    # the wake probe: idle gaps spanning the 0.3 s the runs' lone prompts slowed from
    assert grid.wake_gaps_s == matrix.WAKE_GAPS_S
    assert min(grid.wake_gaps_s) < 0.3 <= max(grid.wake_gaps_s)
    # --decode-step: the profiler's default (the median chunk gap) unless told (item 43)
    assert grid.decode_step == "median"
    monkeypatch.setattr(matrix, "DECODE_STEP", "mean")
    assert ProfileGrid.model_validate(matrix.grid(flags, regime)).decode_step == "mean"


def _gate_at_both_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, list[Path], Callable[[Path], None]]:
    """The gate at 5 %, no sleeping, and a replay that makes its folder, writes which try
    it was into it (``try``: 0, 1, ...) and records each folder it made."""
    gate = _gate()
    monkeypatch.setattr(gate, "GATE", 0.05)
    monkeypatch.setattr(gate.time, "sleep", lambda s: None)
    made: list[Path] = []

    def replay(folder: Path) -> None:
        folder.mkdir()
        (folder / "try").write_text(str(len(made)))
        made.append(folder)

    return gate, made, replay


def test_a_run_the_host_slowed_under_is_set_aside_and_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --gate-after: the probe before each try is in the gate (20 vs 20 ms); after the first
    # try it reads 24 (20 % off the 5 % gate), after the second 20.5: the first run's
    # folder is kept aside under a name no run* glob takes, the second stays
    gate, made, replay = _gate_at_both_ends(monkeypatch)
    readings = iter([20.0, 24.0, 20.0, 20.5])
    run = tmp_path / "run1"
    got = gate.gated_run(lambda: next(readings), 20.0, replay, run, "t", redo=2)
    assert [m.name for m in made] == ["run1", "run1"]
    assert (run / "try").read_text() == "1"
    assert (tmp_path / "out-of-band-run1-1" / "try").read_text() == "0"
    assert sorted(p.name for p in tmp_path.glob("run*")) == ["run1"]
    assert got["step_before"] == 20.0
    assert got["step_after"] == 20.5
    assert got["gate_probes"] == 1
    assert got["out_of_band"] == [24.0]


def test_the_last_try_stays_whatever_it_read_and_without_redo_nothing_is_set_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, made, replay = _gate_at_both_ends(monkeypatch)
    readings = iter([20.0, 30.0, 20.0, 31.0])  # both tries read slow after: 1 redo, kept
    got = gate.gated_run(lambda: next(readings), 20.0, replay, tmp_path / "a", "t", redo=1)
    assert got["step_after"] == 31.0
    assert got["out_of_band"] == [30.0]
    assert (tmp_path / "a").is_dir()
    readings = iter([20.0, 30.0])  # the gate before a run only (the matrices' default)
    got = gate.gated_run(lambda: next(readings), 20.0, replay, tmp_path / "b", "t")
    assert got == {"step_before": 20.0, "gate_probes": 1, "gate_readings": [20.0],
                   "step_after": 30.0, "wall_s": got["wall_s"]}  # fmt: skip
    assert len(made) == 3
    # every reading the gate took is kept, the one that let the run start last
    readings = iter([17.0, 17.5, 20.5, 20.0])
    got = gate.gated_run(lambda: next(readings), 20.0, replay, tmp_path / "c", "t")
    assert got["gate_readings"] == [17.0, 17.5, 20.5]
    assert got["step_before"] == 20.5
    assert got["gate_probes"] == 3


def _batch_profile(path: Path, rows: list[tuple[int, int, float]]) -> Path:
    """A profile of decode rows (batch, passes, ms) at contexts 24 and 72 in turn."""
    lines = ["phase,batch_size,input_tokens,context_len,latency_ms,engine_ms,passes"]
    lines += [f"decode,{b},0,{24 + 48 * (k % 2)},{ms},,{p}" for k, (b, p, ms) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_full_batch_row_is_the_median_of_its_one_pass_rows(tmp_path: Path) -> None:
    gate = _gate()
    csv = _batch_profile(
        tmp_path / "p.csv",
        [(1, 1, 18.0), (1, 1, 19.0), (4, 1, 42.0), (4, 1, 38.6), (2, 2, 60.0), (2, 1, 30.0)],
    )
    assert gate.batch_row(csv, 4) == 40.3  # item 19's profile: 42.0 and 38.6
    assert gate.batch_row(csv, 2) == 30.0  # the fragmented (two-pass) row is not read
    assert gate.batch_row(csv, 3) is None
    old = tmp_path / "old.csv"  # a profile from before the passes column: every row
    old.write_text("phase,batch_size,input_tokens,context_len,latency_ms\ndecode,2,0,24,31.0\n")
    assert gate.batch_row(old, 2) == 31.0


def test_a_profile_off_at_the_full_batch_is_taken_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate()
    monkeypatch.setattr(gate, "GATE", 0.05)
    csv = tmp_path / "p.csv"
    profiles = iter([[40.3, 40.3], [44.0, 45.0]])  # the retake's full-batch rows

    def retake() -> Path:
        return _batch_profile(csv, [(4, 1, ms) for ms in next(profiles)])

    retake()
    checks = iter([43.8, 44.1])  # 40.3 against 43.8: 8 % off the 5 % gate; 44.5 vs 44.1 in
    got, record = gate.batch_checked(csv, 4, lambda: next(checks), retake)
    assert got == csv
    assert gate.batch_row(csv, 4) == 44.5
    assert record == [
        {"profile_ms": 40.3, "check_ms": 43.8},
        {"profile_ms": 44.5, "check_ms": 44.1},
    ]


def test_the_full_batch_check_stops_after_its_tries_and_a_failed_check_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _gate()
    monkeypatch.setattr(gate, "GATE", 0.05)
    csv = _batch_profile(tmp_path / "p.csv", [(2, 1, 30.0)])
    taken: list[int] = []

    def retake() -> Path:
        taken.append(1)
        return csv

    checks = iter([None, 40.0, 40.0, 40.0])  # a check that failed, then 33 % off each time
    _, record = gate.batch_checked(csv, 2, lambda: next(checks), retake, tries=3)
    assert len(taken) == 2  # three profiles in all, the last one kept
    assert [r["check_ms"] for r in record] == [None, 40.0, 40.0]
    _, record = gate.batch_checked(csv, 2, lambda: 30.9, retake, tries=3)
    assert record == [{"profile_ms": 30.0, "check_ms": 30.9}]
    assert len(taken) == 2


def test_the_matrix_full_batch_step_runs_the_profile_decode_probe_on_pinned_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from live_server import StreamServer

    matrix = validation_module("llamacpp_matrix")
    monkeypatch.setattr(matrix, "BATCH_CHECK_PAUSE_S", 0.0)
    grid = tmp_path / "grid.yaml"
    grid.write_text("decode_context: [16, 64]\ndecode_steps: 8\ndecode_batch: [1, 2, 3]\n")
    with StreamServer(ttft_s=0.02, itl_s=0.01) as srv:
        step = matrix.full_batch_step(srv.url, grid, 3)
        bodies = [b for b in srv.received if "prompt" in b]
        median, mean = matrix.full_batch_steps(srv.url, grid, 3)
    assert step is not None
    assert median is not None
    assert mean is not None
    assert 9.0 < step < 20.0
    assert 9.0 < median < 20.0
    # the lock-step windows' mean: the server's 10 ms steps, read over every step
    assert 9.0 < mean < 20.0
    # 3 rounds x 2 contexts x 3 sequences, in slots 0..2, 8 outputs each
    assert len(bodies) == matrix.BATCH_CHECK_ROUNDS * 2 * 3 == 18
    assert sorted({b["id_slot"] for b in bodies}) == [0, 1, 2]
    assert sorted({len(b["prompt"]) for b in bodies}) == [16, 64]
    assert {b["max_tokens"] for b in bodies} == {8}
