"""validation/llamacpp_lone_wait.py: a lone request's wait beyond the engine's prompt time,
split at the server log's lines and grouped by the idle before it (issue 12, item 65)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module

lone = validation_module("llamacpp_lone_wait")
ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "docs" / "validation" / "llamacpp-lone-wait-item65.json"


def _t(s: float) -> str:
    """The log's clock: minutes.seconds.ms.µs since the server started."""
    us = round(s * 1e6)
    return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"


def _task(task: int, slot: int, sel: float, launch: float, tokens: int, prompt_ms: float,
          release: float) -> str:  # fmt: skip
    at = f"id  {slot} | task {task} |"
    return (f"{_t(sel)} I slot get_availabl: id  {slot} | task -1 | selected slot by LRU\n"
            f"{_t(launch)} I slot launch_slot_: {at} processing task, is_child = 0\n"
            f"{_t(launch + 1)} I slot print_timing: {at} prompt eval time =  "
            f"{prompt_ms:.2f} ms /  {tokens} tokens (  1.00 ms per token)\n"
            f"{_t(release)} I slot      release: {at} stop processing\n")  # fmt: skip


def _point(tmp_path: Path) -> Path:
    point = tmp_path / "default_long"
    run = point / "real" / "poisson_0.3" / "run1"
    run.mkdir(parents=True)
    # the client's clock is the server's less 100 s; request 1 comes to an idle server
    # after 6 s, request 2 while request 1 runs
    reqs = [  # arrival, first token, finish, tokens, prompt_ms
        (0.0, 0.4, 4.0, 300, 350.0),
        (10.0, 10.337, 14.0, 327, 300.0),
        (10.5, 11.2, 15.0, 200, 210.0),
    ]
    run.joinpath("requests.jsonl").write_text("".join(
        json.dumps({"request_id": k, "arrival_s": a, "first_token_s": f, "finish_s": e,
                    "input_tokens": n, "ttft_ms": 1e3 * (f - a),
                    "engine_timings": {"prompt_ms": p}}) + "\n"
        for k, (a, f, e, n, p) in enumerate(reqs)))  # fmt: skip
    log = [
        # the same lengths earlier (a speed probe's, say): its clocks disagree, not the run
        _task(1, 0, 1.0, 1.01, 300, 350.0, 3.0),
        _task(2, 1, 2.0, 2.01, 327, 300.0, 9.0),
        _task(3, 2, 2.5, 2.51, 200, 210.0, 4.0),
        # the run: request 1 selected 20 ms after it was sent, launched 10 ms later
        _task(10, 0, 100.003, 100.004, 300, 350.0, 104.001),
        _task(11, 1, 110.020, 110.030, 327, 300.0, 114.002),
        _task(12, 2, 110.510, 110.511, 200, 210.0, 115.000),
    ]
    point.joinpath("llama-server.log").write_text("".join(log))
    return point


def test_a_lone_request_s_wait_is_split_at_the_log_s_lines(tmp_path: Path) -> None:
    rows = lone.lone_parts(_point(tmp_path), "poisson_0.3")
    # the run's first request and the one sent while another ran are left out
    assert len(rows) == 1
    (r,) = rows
    assert r["idle_s"] == pytest.approx(6.0)
    # the clock offset is the median release less finish: 100.001 s
    assert r["path_ms"] == pytest.approx(19.0, abs=1e-6)
    assert r["launch_ms"] == pytest.approx(10.0, abs=1e-6)
    # the first token at 110.338 on the server's clock, less 300 ms of prompt, less launch
    assert r["after_ms"] == pytest.approx(8.0, abs=1e-6)
    # the parts add up to the client's TTFT less prompt_ms
    assert r["total_ms"] == pytest.approx(337.0 - 300.0, abs=1e-6)
    got = lone.by_idle(rows)
    assert got == [{"idle_s": "5-inf", "requests": 1, "path_ms": 19.0, "launch_ms": 10.0,
                    "after_ms": 8.0, "total_ms": 37.0}]  # fmt: skip


def test_each_run_s_first_request_is_split_too(tmp_path: Path) -> None:
    # --first: the first request, sent at 0 (100.001 on the server's clock), selected at
    # 100.003 and launched at 100.004; its first token at 100.401, less 350 ms of prompt
    (f,) = lone.first_parts(_point(tmp_path), "poisson_0.3")
    assert f == {"run": "run1", "tokens": 300, "path_ms": 2.0, "launch_ms": 1.0,
                 "after_ms": 47.0, "total_ms": 50.0}  # fmt: skip
    assert lone.main([str(tmp_path / "default_long"), "--first", "--json",
                      str(tmp_path / "out.json")]) == 0  # fmt: skip
    kept = json.loads((tmp_path / "out.json").read_text())
    assert kept["points"][str(tmp_path / "default_long")] == {"first": [f]}


def test_a_failed_lone_request_is_left_out(tmp_path: Path) -> None:
    point = _point(tmp_path)
    run = point / "real" / "poisson_0.3" / "run1" / "requests.jsonl"
    rows = [json.loads(x) for x in run.read_text().splitlines()]
    rows[1].update(first_token_s=None, engine_timings=None, status="error")
    run.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert lone.lone_parts(point, "poisson_0.3") == []


def test_a_run_not_in_the_log_and_a_missing_log_say_so(tmp_path: Path) -> None:
    point = _point(tmp_path)
    log = point / "llama-server.log"
    log.write_text(log.read_text().replace("327 tokens", "328 tokens"))
    with pytest.raises(SystemExit, match=r"run1: its requests are not in the log"):
        lone.lone_parts(point, "poisson_0.3")
    with pytest.raises(SystemExit, match=r"no real runs at --load closed_4"):
        lone.lone_parts(point, "closed_4")
    with pytest.raises(SystemExit, match=r"no llama-server\.log"):
        lone.lone_parts(tmp_path / "nowhere", "poisson_0.3")


def test_item_65s_kept_output() -> None:
    # the lone requests' wait split at the log's lines: on item 64's host the path to
    # the main loop grew with the idle before it; on items 55, 60, 61 and 65 it held
    lone = json.loads(KEPT.read_text())["points"]

    def path(point: str) -> list[float]:
        """The path's median by idle group, shortest idle first."""
        return [g["path_ms"] for g in lone[point]["by_idle"]]

    item64 = [f"results/validation-llamacpp/{p}" for p in ("default_long", "kvu_long")]
    assert [path(p) for p in item64] == [[9.7, 20.2, 43.8, 71.1], [7.3, 13.8, 42.1, 76.6]]
    others = [path(p) for p in lone if p not in item64]
    assert len(others) == 4
    assert all(max(x) < 10 for x in others)


def test_item_67s_first_requests_before_and_after_settle() -> None:
    # --first on the same three points before (item 66's folders, kept outside the repo)
    # and after validate_cpu.py --matrix --settle emptied the slots before each run: the
    # long points' first requests waited 68-166 ms for the probes' states, then 3-10 ms
    kept = json.loads(
        (ROOT / "docs" / "validation" / "llamacpp-first-request-item67.json").read_text()
    )
    assert kept["argv"][0] == "--first"

    def totals(point: str) -> list[float]:
        return [f["total_ms"] for f in kept["points"][point]["first"]]

    before = [f"/work/keep/item66/{p}" for p in ("kvu_long", "np2_b64_long", "kvu_short")]
    after = [f"results/validation-llamacpp/{p}" for p in ("kvu_long", "np2_b64_long", "kvu_short")]
    assert [totals(p) for p in before] == [
        [165.5, 146.3, 149.7],
        [115.8, 68.4, 90.3],
        [11.8, 9.7, 10.8],
    ]
    assert all(max(totals(p)) <= 10.1 for p in after)
    # before, the launch (the chosen slot's copy) took 48-62 ms at the long points
    launches = [f["launch_ms"] for p in before[:2] for f in kept["points"][p]["first"]]
    assert min(launches) > 47
    assert max(launches) < 62
