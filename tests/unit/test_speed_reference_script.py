"""validation/speed_reference.py: whether a profile's speed references read the speed
its measurements ran at."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from builders import validation_module

SCRIPT = validation_module("speed_reference")
HEAD = "round,row,phase,batch_size,input_tokens,context_len,reference_ms,latency_ms"


def _pairs(path: Path, speeds: np.ndarray, slowdowns: np.ndarray) -> Path:
    """A profile's pairs: 3 rows x 4 rounds; each measurement at *slowdowns*, each
    reference at *speeds* (both in the order taken)."""
    base = {1: ("prefill", 100.0), 2: ("decode", 15.0), 3: ("mixed", 400.0)}
    lines, k = [HEAD], 0
    for r in range(1, 5):
        for row, (phase, ms) in base.items():
            lines.append(f"{r},{row},{phase},1,8,0,{14.0 * speeds[k]:.4f},"
                         f"{ms * slowdowns[k]:.4f}")  # fmt: skip
            k += 1
    profile = path / "p.csv"
    profile.with_suffix(".speed.csv").write_text("\n".join(lines) + "\n")
    return profile


def test_references_that_read_the_measurements_speed_track_it(tmp_path: Path) -> None:
    speed = np.random.default_rng(1).uniform(0.8, 1.3, 12)
    t = SCRIPT.tracking(SCRIPT.read_pairs(_pairs(tmp_path, speed, speed)))
    assert t["measurements"] == 12
    assert t["corr"] == pytest.approx(1.0, abs=0.05)
    assert t["slope"] == pytest.approx(1.0, abs=0.1)
    assert t["row_spread_scaled"] == pytest.approx(1.0, abs=1e-3)  # every round alike
    assert t["row_spread_raw"] > 1.15
    assert set(t["corr_by_phase"]) == {"decode", "mixed", "prefill"}
    assert f"slope {t['slope']:+.2f} (1: tracks)" in SCRIPT.report("p", t)


def test_references_that_read_nothing_widen_the_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    t = SCRIPT.tracking(SCRIPT.read_pairs(_pairs(tmp_path, rng.uniform(0.8, 1.3, 12), np.ones(12))))
    assert t["corr"] != t["corr"]  # NaN: the measurements never move
    assert t["row_spread_raw"] == pytest.approx(1.0)
    assert t["row_spread_scaled"] > 1.1  # scaling adds the references' noise


def test_a_profile_without_pairs_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="speed_reference: record"):
        SCRIPT.read_pairs(tmp_path / "p.csv")


def test_the_amd_hosts_references_track_little_of_the_measurements() -> None:
    """The stored profiles of docs/VALIDATION-llamacpp.md item 12: the reading its
    numbers come from (a measurement's deviation correlates +0.28 and +0.26 with its
    reference's; scaling leaves the rows' spread as wide or wider)."""
    root = Path(__file__).resolve().parents[2] / "docs" / "validation" / "speed-reference-epyc"
    long_, short = (
        SCRIPT.tracking(SCRIPT.read_pairs(root / f"default_{name}.csv"))
        for name in ("long", "short")
    )
    assert (long_["corr"], short["corr"]) == (0.28, 0.26)
    assert (long_["slope"], short["slope"]) == (0.31, 0.28)
    assert long_["row_spread_scaled"] > long_["row_spread_raw"]
    assert long_["measurements"] == short["measurements"] == 96


def test_the_sustained_phases_are_summarised_by_their_medians() -> None:
    sustained = validation_module("llamacpp_sustained")
    found = {
        "gapped_before": [13.0, 14.0, 15.0],
        "sustained": [float(x) for x in range(1, 31)],
        "gapped_after": [12.0, 16.0],
    }
    s = sustained.summary(found)
    assert (s["gapped_before"], s["sustained"], s["gapped_after"]) == (14.0, 15.5, 14.0)
    assert (s["sustained_first10"], s["sustained_last10"]) == (5.5, 25.5)
    stored = Path(__file__).resolve().parents[2] / "docs/validation/llamacpp-sustained-epyc.json"
    rounds = json.loads(stored.read_text())["rounds"]
    assert [r["summary"]["sustained"] for r in rounds] == [13.75, 15.5]
    assert [sustained.summary(r["steps"]) for r in rounds] == [r["summary"] for r in rounds]


def test_the_kvu_long_profile_tracks_a_little_better() -> None:
    root = Path(__file__).resolve().parents[2] / "docs" / "validation" / "speed-reference-epyc"
    t = SCRIPT.tracking(SCRIPT.read_pairs(root / "kvu_long.csv"))
    assert (t["corr"], t["slope"]) == (0.41, 0.35)
    assert t["row_spread_scaled"] < t["row_spread_raw"]


def test_the_prompt_probe_reads_the_servers_prompt_time(monkeypatch) -> None:
    # --probe prompt: a lone prompt of PROMPT_TOKENS fresh ids and one output, timed by
    # the server's timings.prompt_ms; None when the server fails
    sustained = validation_module("llamacpp_sustained")
    sent: list[dict] = []

    class Reply:
        def __init__(self, body: dict) -> None:
            self.body = body

        def json(self) -> dict:
            return self.body

    def post(url: str, json: dict, timeout: float) -> Reply:
        sent.append(json)
        return Reply({"timings": {"prompt_ms": 91.5}} if len(sent) == 1 else {"error": "x"})

    monkeypatch.setattr(sustained.speed_gate.httpx, "post", post)
    assert sustained.prompt_step("http://127.0.0.1:1") == 91.5
    assert sustained.prompt_step("http://127.0.0.1:1") is None
    body = sent[0]
    assert len(body["prompt"]) == sustained.PROMPT_TOKENS
    assert (body["n_predict"], body["cache_prompt"]) == (1, False)
    assert sent[0]["prompt"] != sent[1]["prompt"]  # fresh ids each time
    # the phases time what --probe names
    monkeypatch.setattr(sustained.time, "sleep", lambda s: None)
    monkeypatch.setattr(sustained, "SUSTAINED_S", 0.0)
    monkeypatch.setitem(sustained.PROBES, "prompt", lambda url: 90.0)
    found = sustained.phases("http://127.0.0.1:1", "prompt")
    assert found["gapped_before"] == found["gapped_after"] == [90.0] * sustained.GAPPED


def test_item_27s_prompts_run_quicker_after_minutes_of_load() -> None:
    # docs/VALIDATION-llamacpp.md item 27: a lone 64-token prompt, gapped 3 s / back to
    # back 60 s / gapped; back to back it ends ~15 % quicker than gapped, both rounds;
    # the lone decode right after does not move
    sustained = validation_module("llamacpp_sustained")
    root = Path(__file__).resolve().parents[2] / "docs" / "validation"
    prompt = json.loads((root / "llamacpp-sustained-prompt-epyc.json").read_text())
    assert prompt["probe"] == "prompt"
    for r in prompt["rounds"]:
        s = sustained.summary(r["steps"])
        assert s == r["summary"]
        gapped = min(s["gapped_before"], s["gapped_after"])
        assert s["sustained_last10"] < 0.92 * gapped
        assert s["sustained"] < s["sustained_first10"]
    assert [r["summary"]["gapped_before"] for r in prompt["rounds"]] == [139.78, 127.05]
    assert [r["summary"]["sustained"] for r in prompt["rounds"]] == [110.37, 113.62]
    decode = json.loads((root / "llamacpp-sustained-decode-item27-epyc.json").read_text())
    s = decode["rounds"][0]["summary"]
    assert (s["gapped_before"], s["sustained"]) == (13.64, 13.02)
