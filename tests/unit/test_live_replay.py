"""Replay against the in-process server: the simulator's workload, exact records, faults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from live_server import StreamServer
from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.cli import main
from lyra_simpy.engine.request import RECORD_FIELDS
from lyra_simpy.live.replay import ReplayConfig, replay
from lyra_simpy.live.workload import planned_requests
from lyra_simpy.metrics.io import read_itl_csv, read_jsonl


def _closed(tiny_raw: dict[str, Any], n: int = 6) -> dict[str, Any]:
    tiny_raw["workload"] = {
        "num_requests": n,
        "arrival": {"name": "closed_loop", "concurrency": 1},
        "input_tokens": {"name": "fixed", "tokens": 8},
        "output_tokens": {"name": "fixed", "tokens": 4},
    }
    return tiny_raw


def test_plan_is_the_simulators_workload(tiny_raw: dict[str, Any]) -> None:
    sc = scenario_from_dict(tiny_raw)
    plan = planned_requests(sc)
    res = simulate(sc)
    assert plan.arrival_s == res.records["arrival_s"].tolist()
    assert [len(p) for p in plan.prompts] == res.records["input_tokens"].tolist()
    assert plan.output_tokens == res.records["output_tokens"].tolist()
    again = planned_requests(sc)
    assert again.prompts == plan.prompts  # same seed, same ids
    assert len({p[0] for p in plan.prompts}) > 1  # fresh ids per request


def test_shared_prefix_units_share_ids(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["workload"]["input_tokens"] = {"name": "fixed", "tokens": 32}
    tiny_raw["workload"]["prefix"] = {"name": "system_prompt", "groups": 1, "prefix_tokens": 16}
    plan = planned_requests(scenario_from_dict(tiny_raw))
    assert all(p[:16] == plan.prompts[0][:16] for p in plan.prompts)
    assert plan.prompts[0][16:] != plan.prompts[1][16:]


def test_a_prompt_seed_draws_other_ids_for_the_same_requests(tiny_raw: dict[str, Any]) -> None:
    # item 84: llama-server restores a prompt it has seen from its cache in RAM, so each
    # repeat of a load needs ids of its own; lengths, times and outputs stay the scenario's
    tiny_raw["workload"]["input_tokens"] = {"name": "fixed", "tokens": 32}
    tiny_raw["workload"]["prefix"] = {"name": "system_prompt", "groups": 1, "prefix_tokens": 16}
    sc = scenario_from_dict(tiny_raw)
    plan, other = planned_requests(sc), planned_requests(sc, prompt_seed=12345)
    assert (other.arrival_s, other.output_tokens) == (plan.arrival_s, plan.output_tokens)
    assert [len(p) for p in other.prompts] == [len(p) for p in plan.prompts]
    assert all(a[16:] != b[16:] for a, b in zip(plan.prompts, other.prompts, strict=True))
    # the shared units are shared within the run, not with the run before
    assert all(p[:16] == other.prompts[0][:16] for p in other.prompts)
    assert other.prompts[0][:16] != plan.prompts[0][:16]
    assert planned_requests(sc, prompt_seed=sc.seed).prompts == plan.prompts
    assert planned_requests(sc, prompt_seed=12345).prompts == other.prompts


def test_cli_replay_sends_the_prompt_seeds_ids_and_keeps_the_seed(
    tmp_path: Path, tiny_raw: dict[str, Any]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(_closed(tiny_raw, 3)))
    sent = []
    for k, seed in enumerate(([], ["--prompt-seed", "8"])):
        with StreamServer() as srv:
            out = tmp_path / f"o{k}"
            argv = ["replay", str(path), "--endpoint", srv.url, "--out", str(out), *seed]
            assert main(argv) == 0
            sent.append([b["prompt"] for b in srv.received])
        man = json.loads((out / "manifest.json").read_text())
        assert man["token_ids"]["prompt_seed"] == (8 if seed else None)
    sc = scenario_from_dict(_closed(tiny_raw, 3))
    assert sent[0] == planned_requests(sc).prompts
    assert sent[1] == planned_requests(sc, prompt_seed=8).prompts != sent[0]


def test_cli_replay_runs_several_scenarios_round_by_round_each_run_its_own_prompts(
    tmp_path: Path, tiny_raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # item 86: every scenario's first run, then every scenario's second; run K of the i-th
    # scenario sends the ids of seed S + 1000 (i - 1) + (K - 1) (S: the scenario's seed)
    a, b = _closed(tiny_raw, 2), _closed(json.loads(json.dumps(tiny_raw)), 2)
    b["name"] = "other"
    b["workload"]["input_tokens"]["tokens"] = 5
    paths = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path, raw in zip(paths, (a, b), strict=True):
        path.write_text(json.dumps(raw))
    with StreamServer() as srv:
        argv = ["replay", *map(str, paths), "--endpoint", srv.url, "--out", str(tmp_path / "o")]
        assert main([*argv, "--repeats", "2"]) == 0
        sent = [b_["prompt"] for b_ in srv.received]
    assert [len(p) for p in sent] == [8, 8, 5, 5, 8, 8, 5, 5]
    want = []
    for k in (1, 2):
        for i, raw in enumerate((a, b)):
            seed = 7 + 1000 * i + (k - 1)  # (tiny's seed is 7)
            folder = tmp_path / "o" / raw["name"] / f"run{k}"
            man = json.loads((folder / "manifest.json").read_text())
            assert man["token_ids"]["prompt_seed"] == seed
            assert len(read_jsonl(folder / "requests.jsonl")) == 2
            want += planned_requests(scenario_from_dict(raw), prompt_seed=seed).prompts
    assert sent == want
    assert sent[:2] != sent[4:6]  # a scenario's two runs send other prompts
    out = capsys.readouterr().out
    assert (
        out.index("tiny: run 1 of 2, prompt seed 7")
        < out.index("other: run 1 of 2, prompt seed 1007")
        < out.index("tiny: run 2 of 2, prompt seed 8")
    )
    # one scenario, repeated: its runs under --out, from --prompt-seed on
    with StreamServer() as srv:
        argv = ["replay", str(paths[0]), "--endpoint", srv.url, "--out", str(tmp_path / "one")]
        assert main([*argv, "--repeats", "2", "--prompt-seed", "40"]) == 0
    seeds = [json.loads((tmp_path / "one" / f"run{k}" / "manifest.json").read_text())
             ["token_ids"]["prompt_seed"] for k in (1, 2)]  # fmt: skip
    assert seeds == [40, 41]


def test_cli_replay_of_scenarios_sharing_a_name_is_one_line_and_sends_nothing(
    tmp_path: Path, tiny_raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path in paths:
        path.write_text(json.dumps(_closed(tiny_raw, 2)))
    with StreamServer() as srv:
        code = main(["replay", *map(str, paths), "--endpoint", srv.url, "--out", str(tmp_path)])
        assert srv.received == []
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "two of the files are named 'tiny'" in err
    assert not (tmp_path / "tiny").exists()


def test_open_loop_replay_writes_the_contract(tmp_path: Path, tiny_raw: dict[str, Any]) -> None:
    sc = scenario_from_dict(tiny_raw)
    with StreamServer(ttft_s=0.02, itl_s=0.004) as srv:
        summary, complete = replay(sc, ReplayConfig(endpoint=srv.url), tmp_path / "r")
    assert complete
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    assert len(rows) == 12
    for row in rows:
        assert list(row)[: len(RECORD_FIELDS)] == list(RECORD_FIELDS)
        assert row["status"] == "ok"
        assert row["ttft_ms"] >= 20.0
    plan = planned_requests(sc)
    assert [r["output_tokens"] for r in rows] == plan.output_tokens
    # Sent on time (within scheduling slack), in order.
    assert np.allclose([r["arrival_s"] for r in rows], plan.arrival_s, atol=0.25)
    _, counts = read_itl_csv(tmp_path / "r" / "itl.csv")
    assert counts.sum() == sum(n - 1 for n in plan.output_tokens)
    assert summary["completed"] == 12
    # The same names as a simulation, but for the model-based slowdown and cache bound,
    # and what the simulated cluster's replicas did (failures, retries, replica-hours).
    missing = set(simulate(sc).summary) - set(summary)
    cluster = {"retried", "goodput_lost_to_failures", "availability", "replica_hours",
               "mean_replicas_serving"}  # fmt: skip
    assert all("slowdown" in k or k == "prefix_cache_hit_rate_bound" or k in cluster
               for k in missing)  # fmt: skip
    assert set(summary) <= set(simulate(sc).summary)
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["complete"] is True
    assert man["engine"]["engine"] == "llama.cpp"
    assert man["engine"]["version"] == "test-1"
    assert man["scenario"]["name"] == "tiny"
    # the side file: every token's chunk time, on the clock of arrival_s
    tokens = {t["request_id"]: t for t in read_jsonl(tmp_path / "r" / "tokens.jsonl")}
    assert sorted(tokens) == [r["request_id"] for r in rows]
    for row in rows:
        t = tokens[row["request_id"]]
        assert sum(t["chunk_tokens"]) == row["output_tokens"]
        assert t["chunk_s"][0] == row["first_token_s"]
        assert t["chunk_s"][-1] == row["finish_s"]
        assert t["chunk_s"] == sorted(t["chunk_s"])


@pytest.mark.parametrize("api", ["openai", "sglang"])
def test_faulty_requests_are_recorded_not_fatal(
    tmp_path: Path, tiny_raw: dict[str, Any], api: Any
) -> None:
    sc = scenario_from_dict(_closed(tiny_raw))
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        srv.faults = {1: "http500", 2: "malformed", 3: "drop", 4: "wrong_count", 5: "hang"}
        cfg = ReplayConfig(endpoint=srv.url, api=api, timeout_s=1.0)
        summary, complete = replay(sc, cfg, tmp_path / "r")
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    ok, bad = "ok", "unfinished"
    assert [r["status"] for r in rows] == [ok, bad, bad, bad, ok, bad]
    assert [r.get("error") for r in rows] == [
        None,
        "HTTP 500",
        "malformed chunk",
        "connection dropped",
        None,
        "timeout after 1 s",
    ]
    assert rows[4]["output_tokens"] == 3
    assert rows[4]["requested_output_tokens"] == 4
    assert rows[4]["tpot_ms"] == pytest.approx((rows[4]["e2el_ms"] - rows[4]["ttft_ms"]) / 2)
    assert rows[3]["received_tokens"] == 2
    assert rows[1]["finish_s"] is None
    assert complete
    assert summary["completed"] == 2
    assert summary["unfinished"] == 4


def test_time_limit_keeps_what_was_gathered(tmp_path: Path, tiny_raw: dict[str, Any]) -> None:
    sc = scenario_from_dict(_closed(tiny_raw))
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        srv.faults = {2: "hang"}
        cfg = ReplayConfig(endpoint=srv.url, timeout_s=5.0, time_limit_s=1.5)
        _, complete = replay(sc, cfg, tmp_path / "r")
    assert not complete
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    assert [r["status"] for r in rows] == ["ok", "ok", "unfinished"]
    assert rows[2]["error"] == "stopped"
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["complete"] is False
    assert man["stopped"] == "time limit 1.5 s"


def test_unreachable_endpoint_fails_fast_with_one_line(
    tmp_path: Path, tiny_raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(tiny_raw))
    code = main(
        ["replay", str(path), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("lyra-simpy: endpoint http://127.0.0.1:9: unreachable")
    assert not (tmp_path / "o").exists()


def test_cli_replay_prints_a_summary(
    tmp_path: Path, tiny_raw: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(_closed(tiny_raw, 3)))
    with StreamServer() as srv:
        code = main(["replay", str(path), "--endpoint", srv.url, "--out", str(tmp_path / "o")])
    assert code == 0
    assert "3 ok, 0 unfinished" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--timeout-s", "0"], "--timeout-s: got '0', must be a number > 0 (s)"),
        (["--max-in-flight", "x"], "--max-in-flight: got 'x', must be an integer >= 1"),
        (["--extra-body", "[1]"], "--extra-body: got '[1]', must be a JSON object"),
        (["--api", "grpc"], "invalid choice: 'grpc'"),
        (["--prompt-seed", "-1"], "--prompt-seed: got '-1', must be an integer >= 0"),
        (["--repeats", "0"], "--repeats: got '0', must be an integer >= 1"),
    ],
)
def test_cli_bad_replay_options_exit_2(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", "x.yaml", "--endpoint", "http://h:1", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_vllm_streams_without_text_are_replayed_and_uncountable_ones_recorded(
    tmp_path: Path, tiny_raw: dict[str, Any]
) -> None:
    # vLLM --skip-tokenizer-init: text "" in every chunk. This used to crash records().
    sc = scenario_from_dict(_closed(tiny_raw, 5))
    with StreamServer(ttft_s=0.01, itl_s=0.002, style="vllm") as srv:
        srv.faults = {1: "no_tokens", 2: "no_usage", 3: "usage_plus_2"}
        cfg = ReplayConfig(endpoint=srv.url, extra_body={"return_token_ids": False})
        summary, complete = replay(sc, cfg, tmp_path / "r")
    assert complete
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    assert [r["status"] for r in rows] == ["ok", "unfinished", "unfinished", "ok", "ok"]
    assert rows[1]["error"].startswith("no tokens (0 choice chunks")
    assert rows[2]["error"].startswith("no tokens (4 choice chunks")
    assert rows[1]["finish_s"] is None
    assert rows[1]["tpot_ms"] is None
    row = rows[3]
    assert (row["output_tokens"], row["counted_by"], row["stream_tokens"]) == (6, "usage", 4)
    assert rows[3]["tpot_ms"] == pytest.approx((rows[3]["e2el_ms"] - rows[3]["ttft_ms"]) / 5)
    assert "counted_by" not in rows[0]
    # ITLs: 3 per request counted chunk by chunk (rows 0 and 4), none from row 3
    _, counts = read_itl_csv(tmp_path / "r" / "itl.csv")
    assert counts.sum() == 6
    assert summary["completed"] == 3
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["token_counting"] == {"chunks": 2, "usage": 1, "text": 2}


def test_vllm_token_ids_are_asked_for_and_counted(tmp_path: Path, tiny_raw: dict[str, Any]) -> None:
    sc = scenario_from_dict(_closed(tiny_raw, 3))
    with StreamServer(ttft_s=0.01, itl_s=0.002, style="vllm", tokens_per_chunk=2) as srv:
        replay(sc, ReplayConfig(endpoint=srv.url), tmp_path / "r")
        bodies = srv.received
    assert all(b["return_token_ids"] is True for b in bodies)
    assert {b["model"] for b in bodies} == {"tiny"}  # /v1/models' name: vLLM 404s others
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    assert [(r["status"], r["output_tokens"]) for r in rows] == [("ok", 4)] * 3
    _, counts = read_itl_csv(tmp_path / "r" / "itl.csv")
    assert counts.sum() == 3  # one gap per request: two chunks of two tokens
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["token_counting"] == {"token_ids": 3}


def test_a_model_name_vllm_does_not_serve_is_a_404_per_request(
    tmp_path: Path, tiny_raw: dict[str, Any]
) -> None:
    sc = scenario_from_dict(_closed(tiny_raw, 2))
    cfg = ReplayConfig(endpoint="", extra_body={"model": "default"})
    with StreamServer(ttft_s=0.01, itl_s=0.002, style="vllm") as srv:
        replay(sc, cfg.model_copy(update={"endpoint": srv.url}), tmp_path / "r")
    rows = read_jsonl(tmp_path / "r" / "requests.jsonl")
    assert [(r["status"], r["error"]) for r in rows] == [("unfinished", "HTTP 404")] * 2


def test_replay_help_and_config_share_one_set_of_defaults():
    """The command line gives ReplayConfig only what the user typed (issue 15: the
    defaults lived twice, in the parser and in the config)."""
    import re

    from lyra_simpy.cli import _parser
    from lyra_simpy.live.replay import ReplayConfig

    args = _parser().parse_args(["replay", "s.yaml", "--endpoint", "http://127.0.0.1:1"])
    assert all(getattr(args, k) is None for k in ("api", "timeout_s", "max_in_flight"))
    helps = {
        a.dest: a.help for a in _parser()._subparsers._group_actions[0].choices["replay"]._actions
    }
    defaults = ReplayConfig(endpoint="http://127.0.0.1:1")
    for dest in ("timeout_s", "time_limit_s", "max_in_flight"):
        (shown,) = re.findall(r"ReplayConfig: (\d+)", helps[dest])
        assert float(shown) == getattr(defaults, dest)
