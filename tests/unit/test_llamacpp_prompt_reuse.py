"""A prompt llama-server has seen comes back from its prompt cache in RAM (issue 12,
docs/VALIDATION-llamacpp.md item 84): the verbose log's saves and restores
(``validation/llamacpp_prompt_reuse.py``), each real run's save price
(``llamacpp_save_price.py --by-run``), the matrix's prompt seeds, and the item's
figures against the files kept beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builders import llamacpp_log_line as _line
from builders import validation_module

ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "docs" / "validation"
reuse = validation_module("llamacpp_prompt_reuse")
save_price = validation_module("llamacpp_save_price")
points = validation_module("llamacpp_points")

# lines of a verbose llama-server log (0c1e570, `-np 4 -c 4096 -t 2 -v`): a save that
# copies, one the cache skips, a restore of a prompt sent again, then the save after it
LOG = """\
0.12.815.770 I slot launch_slot_: id  2 | task 22 | processing task, is_child = 0
0.12.815.922 I srv   prompt_save:  - saving prompt with length 319, total state size = 5.615 MiB (draft: 0.000 MiB)
0.12.825.075 D slot process_sing: id  3 | task -1 | __TEST_TAG_CACHE_IDLE_SLOT__
0.12.825.161 I srv        update:  - cache state: 1 prompts, 9.955 MiB (limits: 8192.000 MiB, 4096 tokens, 262508 est)
0.14.467.816 I srv   prompt_save:  - saving prompt with length 319, total state size = 5.615 MiB (draft: 0.000 MiB)
0.14.467.847 I srv         alloc:  - prompt is already in the cache, skipping
0.21.361.138 I srv   prompt_save:  - saving prompt with length 319, total state size = 5.615 MiB (draft: 0.000 MiB)
0.21.361.143 I srv         alloc:  - prompt is already in the cache, skipping
0.21.361.155 I srv          load:  - found better prompt with f_keep = 0.940, f_sim = 1.000
0.21.362.730 I srv        update:  - cache state: 4 prompts, 39.820 MiB (limits: 8192.000 MiB, 4096 tokens, 262508 est)
0.21.363.243 I srv   prompt_save:  - saving prompt with length 100, total state size = 1.760 MiB (draft: 0.000 MiB)
0.21.366.118 D slot process_sing: id  2 | task -1 | __TEST_TAG_CACHE_IDLE_SLOT__
0.21.366.243 I srv        update:  - cache state: 5 prompts, 49.774 MiB (limits: 8192.000 MiB, 4096 tokens, 262508 est)
"""  # noqa: E501


def test_the_logs_saves_that_copied_and_its_restores_timed_to_the_caches_next_state() -> None:
    events = reuse.cache_events(LOG.splitlines())
    assert events == [
        {"kind": "save", "tokens": 319, "ms": 9.239},
        {"kind": "load", "ms": 1.575},
        {"kind": "save", "tokens": 100, "ms": 3.0},
    ]
    got = reuse.passes(events)
    assert got["first"]["saves"] == {"ms": [9.239], "median_ms": 9.24,
                                     "median_ms_per_token": 0.029, "tokens": [319]}  # fmt: skip
    assert got["second"]["loads"] == {"ms": [1.575], "median_ms": 1.57}
    assert got["second"]["saves"]["median_ms_per_token"] == 0.03


def test_the_probes_pairs_saves_are_told_apart_by_pass() -> None:
    # --pinned, 2 rounds of sizes 256 and 512: the saves of slot 1 come fresh, fresh, then
    # after a restore, after a restore, and again; the lone prompts' 16 tokens left out
    ms = iter(range(1, 9))
    events = []
    for _ in range(2):
        for _ in range(2):
            for n in (256, 512):
                events += [{"kind": "save", "tokens": n, "ms": float(next(ms))},
                           {"kind": "save", "tokens": 16, "ms": 0.2}]  # fmt: skip
    assert reuse.pinned_saves(events, [256, 512], 2) == {
        "256": {"fresh_ms": [1.0, 5.0], "after_restore_ms": [3.0, 7.0]},
        "512": {"fresh_ms": [2.0, 6.0], "after_restore_ms": [4.0, 8.0]},
    }
    with pytest.raises(SystemExit, match=r"7 saves of slot 1 in the log, expected 8$"):
        reuse.pinned_saves(events[:-2], [256, 512], 2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "256,x"], "--sizes: got '256,x', must be token counts of 32 to 2000"),
        (["--rounds", "0"], "--rounds: got 0, must be 1 or more"),
        (["--prompts", "1"], "--prompts: got 1, must be 2 or more"),
        (["--tokens", "5000"], "--tokens: got 5000, must be 32 to 2000"),
    ],
)
def test_the_probes_sizes_are_checked_before_a_server_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        reuse.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_every_real_run_of_a_point_replays_prompts_of_its_own() -> None:
    runs = [(load, f"run{k}") for load in points.LOADS for k in range(1, 7)]  # (floors: 4-6)
    seeds = [points.prompt_seed(load, run) for load, run in runs]
    assert len(set(seeds)) == len(runs)
    assert points.prompt_seed("poisson_0.3", "run1") == 1001
    assert points.prompt_seed("closed_8", "run3") == 5003


def test_each_runs_window_is_found_by_its_prompts_and_priced_by_its_own_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two runs of the same two requests (prompts of 300 and 250 tokens): the first finds
    # slot 0 holding 400 tokens and saves them in 40 ms; a request right before the second
    # (the matrix's --settle) saves slot 1's 250 in 30 ms, outside the run, and slot 0's as
    # an idle slot; the second run's launch into slot 1 saves the settle's 16 in 3 ms. (A
    # window from 3 s before a run's first finished request took the settle in.)
    here = tmp_path / "default_long"
    for run in ("run1", "run2"):
        (here / "real" / "poisson_0.3" / run).mkdir(parents=True)
        rows = [{"input_tokens": 300}, {"input_tokens": 250}]
        (here / "real" / "poisson_0.3" / run / "requests.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )

    def done(t: float, slot: int, n: int, task: int) -> str:  # (printed as it finishes)
        text = f"prompt eval time =  900.00 ms /  {n} tokens (x)"
        return _line(t, "print_timing", slot, text, task)

    def launch(t: float, slot: int, task: int) -> list[str]:
        return [_line(t - 0.001 * task, "get_availabl", slot, "selected slot by LRU, t_last = 1"),
                _line(t, "launch_slot_", slot, "processing task, is_child = 0", task)]  # fmt: skip

    lines = [
        _line(1.0, "release", 0, "stop processing: n_tokens = 400, truncated = 0"),
        done(2.0, 1, 64, 1),  # a probe between: not a run's
        *launch(10.04, 0, 40),
        *launch(11.501, 1, 1),
        done(14.0, 0, 300, 40),
        done(15.0, 1, 250, 1),
        _line(15.0, "release", 0, "stop processing: n_tokens = 300, truncated = 0"),
        _line(15.1, "release", 1, "stop processing: n_tokens = 250, truncated = 0"),
        *launch(19.03, 1, 30),  # the settle request
        done(19.5, 1, 16, 30),
        _line(19.5, "release", 1, "stop processing: n_tokens = 16, truncated = 0"),
        *launch(20.003, 1, 3),
        *launch(20.5, 0, 4),
        done(21.5, 1, 250, 3),
        done(22.0, 0, 300, 4),
    ]
    (here / "llama-server.log").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(save_price, "OUT", tmp_path)
    got: dict[str, Any] = save_price.by_run("default/long")
    assert got == {"poisson_0.3": [
        {"run": "run1", "start_min": 0.2, "launches": 1, "tokens": 400, "ms_per_token": 0.1},
        {"run": "run2", "start_min": 0.3, "launches": 1, "tokens": 16, "ms_per_token": 0.1875},
    ]}  # fmt: skip
    # a run whose prompts the log lacks is one line
    (here / "real" / "poisson_0.6" / "run1").mkdir(parents=True)
    (here / "real" / "poisson_0.6" / "run1" / "requests.jsonl").write_text(
        json.dumps({"input_tokens": 999}) + "\n"
    )
    with pytest.raises(SystemExit, match=r"^default/long: .*run1's prompts are not in "):
        save_price.by_run("default/long")


def test_item_84s_figures_are_the_kept_files() -> None:
    by_run = json.loads((KEPT / "llamacpp-save-price-by-run-item84.json").read_text())

    def prices(point: str) -> list[float]:
        return [r["ms_per_token"] for runs in by_run["by_run"][point].values() for r in runs]

    first = {p: prices(p)[0] for p in ("default/long", "kvu/long", "np2_b64/long")}
    assert first == {"default/long": 0.0385, "kvu/long": 0.0787, "np2_b64/long": 0.1065}
    probes = {p: round(by_run["points"][p]["probe_ms_per_token"], 4) for p in first}
    assert probes == {"default/long": 0.0879, "kvu/long": 0.093, "np2_b64/long": 0.1113}
    later = [x for p in first for x in prices(p)[1:]]
    assert (len(later), min(later), max(later)) == (42, 0.0071, 0.0171)
    short = [x for p in ("default/short", "kvu/short", "np2_b64/short") for x in prices(p)]
    assert (min(short), max(short)) == (0.0121, 0.0362)
    # every real run of a point sent the same prompts: one run's lengths are every run's
    assert all(len(runs) == 3 for loads in by_run["by_run"].values() for runs in loads.values())

    kept = json.loads((KEPT / "llamacpp-prompt-reuse-item84.json").read_text())
    assert kept["flags"] == "-np 4 -c 4096 -t 2"
    saves1, saves2 = kept["first"]["saves"], kept["second"]["saves"]
    assert (min(saves1["ms"]), max(saves1["ms"]), saves1["median_ms_per_token"]) == (
        9.292, 11.618, 0.0339)  # fmt: skip
    assert (min(saves2["ms"]), max(saves2["ms"]), saves2["median_ms_per_token"]) == (
        2.007, 2.69, 0.0065)  # fmt: skip
    loads = kept["second"]["loads"]["ms"]
    assert (len(loads), min(loads), max(loads)) == (6, 1.244, 1.839)

    pinned = json.loads((KEPT / "llamacpp-prompt-reuse-pinned-item84.json").read_text())
    assert pinned["argv"][0] == "--pinned"
    by = pinned["pinned"]
    assert (min(by["512"]["after_restore_ms"]), max(by["512"]["after_restore_ms"]),
            min(by["768"]["after_restore_ms"]), max(by["768"]["after_restore_ms"])) == (
        3.245, 11.605, 10.901, 22.548)  # fmt: skip
    assert (min(by["512"]["fresh_ms"]), max(by["512"]["fresh_ms"]), min(by["768"]["fresh_ms"]),
            max(by["768"]["fresh_ms"])) == (16.733, 18.596, 19.008, 24.11)  # fmt: skip
    assert by["256"]["fresh_ms"][1:] == [2.569, 2.506]
    assert (min(by["256"]["after_restore_ms"]), max(by["256"]["after_restore_ms"])) == (
        1.549, 2.143)  # fmt: skip

    def held(name: str, column: str) -> dict[str, int]:
        out = json.loads((KEPT / name).read_text())["points"]
        return {p: sum(v[column]["in_target"] for v in loads.values()) for p, loads in out.items()}

    longs = ("default/long", "kvu/long", "np2_b64/long")
    phase = held("llamacpp-at-speed-phase-save-item84.json", "at_speed")
    before = json.loads((KEPT / "llamacpp-at-speed-item81.json").read_text())["phase"]["points"]
    phase81 = {p: sum(v["at_speed"]["in_target"] for v in before[p].values()) for p in longs}
    assert phase == {"default/long": 33, "kvu/long": 29, "np2_b64/long": 35}
    assert phase81 == {"default/long": 29, "kvu/long": 28, "np2_b64/long": 31}
    table1 = held("llamacpp-at-speed-phase-save-item84.json", "table1")
    assert table1 == {"default/long": 27, "kvu/long": 28, "np2_b64/long": 6}
    beside = held("llamacpp-at-speed-beside-save-item84.json", "at_speed")
    beside81 = held("llamacpp-at-speed-beside-item81.json", "at_speed")
    assert (sum(beside.values()), sum(beside81[p] for p in longs)) == (85, 86)
    published = json.loads((KEPT / "llamacpp-matrix.json").read_text())["results"]
    assert sum(
        sum(points.in_target(v["table"]).values()) for p in longs
        for v in published[p]["loads"].values()
    ) == 60  # fmt: skip

    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    for text in (
        "0.0385, 0.0787 and 0.1065 ms a token at `-np 4`, `-kvu` and `-np 2 -b 64` long, "
        "against probes of 0.0879, 0.0930 and 0.1113. Every later run paid 0.0071–0.0171",
        "The short points' runs paid 0.012–0.036 from the first run on (probes 0.016–0.023)",
        "the first pass's saves took 9.3–11.6 ms (a median 0.0339 ms a token), the second "
        "pass's restores 1.2–1.8 ms and its saves 2.0–2.7 ms (0.0065 ms a token)",
        "the three long points hold **97 of 105** against 88 (`-np 4` long 33 against 29, "
        "`-kvu` long 29 against 28, `-np 2 -b 64` long 35 against 31",
        "Table 1 61 against 60 (`-np 4` long 27 against 32",
        "at the readings before each run 85 against 86",
        "the saves after a restore took 3.2–11.6 ms at 512 tokens and 10.9–22.5 at 768, "
        "against 16.7–18.6 and 19.0–24.1 fresh, and at 256 tokens the fresh saves after the "
        "first round were as cheap as those after a restore (2.5 against 1.5–2.1 ms)",
    ):
        assert text in doc, text
    fidelity = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert "At the long points only the first run paid a fresh price " \
           "(0.039–0.107 ms a token, the probes 0.088–0.111), the later ones 0.007–0.017" \
           in fidelity  # fmt: skip
    assert "the long points hold 97 of 105 cells against 88" in fidelity
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "0.0065 ms a token after a restore against 0.0339 fresh" in calibration


def test_item_85s_point_with_fresh_prompts_and_its_save_prices() -> None:
    # item 85: -np 4 long, one run a load, each run its own prompts (--prompt-seed)
    kept = KEPT / "llamacpp-matrix-epyc-item85.json"
    point = json.loads(kept.read_text())["results"]["default/long"]
    table1 = sum(sum(points.in_target(v["table"]).values()) for v in point["loads"].values())
    assert table1 == 4
    assert [c["check_ms"] for c in point["gate"]["batch_check"]] == [65.3, 57.6, 64.1]
    assert point["gate"]["batch_check"][-1]["profile_ms"] == 54.7
    assert (point["host_noise"]["median_ms"], round(point["host_noise"]["p90_over_p10"], 2)) == (
        112.1, 1.18)  # fmt: skip
    probes = json.loads((KEPT / "llamacpp-save-probes-item85.json").read_text())
    assert [round(probes[f]["ms_per_token"], 4) for f in (
        "profile-superseded-1.csv", "profile-superseded-2.csv", "profile.csv")] == [
        0.0909, 0.0079, 0.0139]  # fmt: skip
    by_run = json.loads((KEPT / "llamacpp-save-price-by-run-item85.json").read_text())
    assert by_run["points"]["default/long"]["first_eviction_min"] == 27.6
    runs = [r for rs in by_run["by_run"]["default/long"].values() for r in rs]
    assert len(runs) == 5
    assert (min(r["ms_per_token"] for r in runs), max(r["ms_per_token"] for r in runs)) == (
        0.0113, 0.0238)  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "The three profiles' probes read 0.0909, 0.0079 and 0.0139 ms a token" in doc
    assert "the five runs, each with prompts of its own, paid 0.0113–0.0238" in doc
    assert "Table 1 held 4 of 35: the runs' decode steps ran 1.17–1.53 × its charge" in doc
    assert "the kept profile's four-sequence row 54.7 ms, the check right after it 64.1" in doc
