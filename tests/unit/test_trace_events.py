"""Perfetto traces (lyra_simpy.output.trace_events): loaded back as JSON and checked against the
run they came from; fused and stepped runs give the same file byte for byte."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

import pytest

from lyra_simpy.cli import main
from lyra_simpy.output.trace_events import load_trace_events, write_trace_events
from lyra_simpy.simulation import simulate

#: Long outputs and room to decode: fused spans of many iterations.
DECODE_HEAVY = {
    "workload.num_requests": 30,
    "workload.output_tokens": {"name": "uniform", "low": 20, "high": 200},
    "kv_cache.num_blocks": 400,
    "scheduler.max_num_seqs": 8,
}


def _load(res: Any, tmp_path: Any) -> list[dict[str, Any]]:
    path = tmp_path / "trace_events.json"
    n = write_trace_events(res, path)
    events = load_trace_events(path)["traceEvents"]
    assert len(events) == n
    return events


def _check_structure(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Every event well formed; slices and instants non-decreasing per track; returns the
    slices per (pid, tid)."""
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    last: dict[tuple[Any, ...], float] = {}
    for e in events:
        assert e["ph"] in {"M", "X", "C", "i", "b", "e"}
        assert isinstance(e["pid"], int)
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], (int, float))
        assert e["ts"] >= 0
        key: tuple[Any, ...] = (e["ph"] == "C", e["pid"], e.get("tid"), e.get("name"))
        if e["ph"] in {"X", "i"}:
            key = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(key, 0.0), e
        if e["ph"] == "X":
            assert e["dur"] >= 0
            assert isinstance(e["tid"], int)
            tracks[(e["pid"], e["tid"])].append(e)
            last[key] = e["ts"] + e["dur"] - 1e-3  # a slice ends before the next starts
        else:
            last[key] = e["ts"]
    return tracks


def test_trace_matches_the_run(make_scenario, tmp_path):
    # Tight KV: preemptions; one prompt larger than the KV: rejected.
    sc = make_scenario({"kv_cache.num_blocks": 12, "workload.num_requests": 40})
    res = simulate(sc)
    events = _load(res, tmp_path)
    tracks = _check_structure(events)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}  # fmt: skip
    assert names[(1, None)] == "replica 0"
    assert names[(2, None)] == "requests"
    iterations = tracks[(1, 0)]
    assert len(iterations) == res.engine["iterations"] == len(res.timeseries["start_s"])
    for e, p, d in zip(iterations, res.timeseries["prefill_tokens"].tolist(),
                       res.timeseries["decode_seqs"].tolist(), strict=True):  # fmt: skip
        assert e["args"]["prefill_tokens"] == p
        assert e["args"]["decode_seqs"] == d
        assert e["name"] == ("mixed" if p and d else "prefill" if p else "decode")
    # Counters: the KV in use as recorded, emitted on change.
    kv = [e["args"]["kv_blocks"] for e in events if e["ph"] == "C" and e["name"] == "kv_blocks"]
    series = res.timeseries["kv_blocks"].tolist()
    assert kv == [v for i, v in enumerate(series) if i == 0 or series[i - 1] != v]
    # One track per request; each finished one ends at its finish time.
    n = len(res.records["request_id"])
    request_threads = {e["tid"] for e in events if e["name"] == "thread_name" and e["pid"] == 2}
    assert request_threads == set(range(n))
    finished = [e for e in events if e["ph"] == "i" and e["name"] == "finished"]
    assert len(finished) == res.summary["completed"]
    rejected = [e for e in events if e["ph"] == "i" and e["name"] == "rejected"]
    assert len(rejected) == res.summary["rejected"]
    for rid in range(n):
        if res.records["status"][rid] != "ok":
            continue
        parts = tracks[(2, rid)]
        assert [p["name"] for p in parts] == ["waiting", "prefill", "decode"]
        assert parts[0]["ts"] == round(res.records["arrival_s"][rid] * 1e6, 3)
        end = parts[-1]["ts"] + parts[-1]["dur"]
        assert abs(end - res.records["finish_s"][rid] * 1e6) < 1e-2
        assert parts[0]["args"]["preemptions"] == res.records["preemptions"][rid]
    assert res.records["preemptions"].sum() > 0


@pytest.mark.parametrize(
    "extra",
    [{}, {"cluster": {"replicas": 2, "router": {"name": "least_outstanding"}}}],
    ids=["one_replica", "cluster"],
)
def test_fused_and_stepped_runs_write_the_same_trace(make_scenario, tmp_path, extra):
    fused = simulate(make_scenario({**DECODE_HEAVY, **extra}))
    stepped = simulate(
        make_scenario({**DECODE_HEAVY, **extra, "simulation.fuse_iterations": False})
    )
    # The fused run records every iteration it advances.
    assert len(fused.timeseries["start_s"]) == fused.engine["iterations"]
    write_trace_events(fused, tmp_path / "a.json")
    write_trace_events(stepped, tmp_path / "b.json")
    data = (tmp_path / "a.json").read_bytes()
    assert data == (tmp_path / "b.json").read_bytes()
    assert data.count(b'"tid":0,"ts"') >= fused.engine["iterations"]


def test_disaggregated_run_shows_kv_transfers(make_scenario, tmp_path):
    sc = make_scenario(
        {
            "cluster": {
                "disaggregation": {
                    "prefill": {"count": 1},
                    "decode": {"count": 2},
                    "link": {"bandwidth_gb_s": 1.0, "latency_ms": 1.0, "kv_bytes_per_token": 4096},
                }
            }
        }
    )
    res = simulate(sc)
    events = _load(res, tmp_path)
    tracks = _check_structure(events)
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {
        "replica 0", "replica 1", "replica 2", "requests", "kv link"
    }  # fmt: skip
    begins = [e for e in events if e["ph"] == "b"]
    ends = [e for e in events if e["ph"] == "e"]
    assert len(begins) == len(ends) == len(res.transfers["request_id"]) > 0
    for rid, ms in zip(res.transfers["request_id"].tolist(),
                       res.transfers["kv_transfer_ms"].tolist(), strict=True):  # fmt: skip
        parts = {p["name"]: p for p in tracks[(4, rid)]}
        assert abs(parts["kv_transfer"]["dur"] - ms * 1000) < 1e-2
        assert parts["decode"]["ts"] >= parts["kv_transfer"]["ts"]
    replica_slices = sum(len(v) for (pid, _), v in tracks.items() if pid <= 3)
    assert replica_slices == res.engine["iterations"]


def test_without_timeseries_requests_only(make_scenario, tmp_path):
    res = simulate(make_scenario({"simulation.timeseries": False}))
    tracks = _check_structure(_load(res, tmp_path))
    assert (1, 0) not in tracks
    assert {p["name"] for (pid, _), v in tracks.items() for p in v} == {"waiting", "decode"}


def test_cli_flag_and_scenario_field_write_the_trace(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    raw = {
        "name": "s",
        "workload": {"num_requests": 5, "arrival": {"name": "constant", "rate_per_s": 5},
                     "input_tokens": {"name": "fixed", "tokens": 8},
                     "output_tokens": {"name": "fixed", "tokens": 4}},
        "kv_cache": {"block_size": 8, "num_blocks": 32},
        "cost": {"name": "linear", "base_ms": 5.0},
        "variants": [{"label": "a", "set": {}}, {"label": "b", "set": {}}],
    }  # fmt: skip
    path.write_text(json.dumps(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--no-figures"]) == 0
    assert not (tmp_path / "r" / "s" / "a" / "trace_events.json").exists()
    argv = ["run", str(path), "--out", str(tmp_path / "r"), "--no-figures", "--trace-events"]
    assert main(argv) == 0
    for label in "ab":
        data = load_trace_events(tmp_path / "r" / "s" / label / "trace_events.json")
        assert data["otherData"] == {"scenario": "s", "variant": label}
    raw["output"] = {"trace_events": True}
    path.write_text(json.dumps(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "q"), "--no-figures"]) == 0
    assert (tmp_path / "q" / "s" / "b" / "trace_events.json").is_file()
    capsys.readouterr()


def test_rejected_request_is_an_instant_with_its_reason(make_scenario, tmp_path):
    # A 200-token prompt never fits 4 blocks of 8 tokens: refused at arrival.
    sc = make_scenario({"kv_cache.num_blocks": 4, "workload.num_requests": 3,
                        "workload.input_tokens": {"name": "fixed", "tokens": 200}})  # fmt: skip
    res = simulate(sc)
    assert res.summary["rejected"] == 3
    events = _load(res, tmp_path)
    _check_structure(events)
    rejected = [e for e in events if e["ph"] == "i" and e["name"] == "rejected"]
    assert [e["tid"] for e in rejected] == [0, 1, 2]
    for e in rejected:
        assert e["ts"] == round(res.records["arrival_s"][e["tid"]] * 1e6, 3)
        # The records' reject_reason when they carry one (DESIGN §4), else null.
        reasons = res.records.get("reject_reason")
        want = None if reasons is None else reasons[e["tid"]]
        assert e["args"] == {"reject_reason": want}
    assert not any(e["ph"] == "X" and e["pid"] == 2 for e in events)


def test_logged_run_shows_every_chunk_and_preemption(make_scenario, tmp_path):
    """With the request log (what --trace-events switches on) a request's thread shows
    each prompt chunk an iteration computed and each preemption: under chunked prefill
    with a 16-token budget and a tight KV pool, the chunks of a request add up to its
    prompt plus every recompute, and the preempted instants match the records."""
    sc = make_scenario(
        {
            "scheduler": {
                "name": "chunked_prefill",
                "max_num_seqs": 4,
                "max_num_batched_tokens": 16,
            },
            "kv_cache.num_blocks": 12,
            "workload.num_requests": 30,
        }
    )
    res = simulate(sc, request_log=True)
    assert simulate(sc).records["finish_s"].tolist() == res.records["finish_s"].tolist()
    events = _load(res, tmp_path)
    tracks = _check_structure(events)
    preempted = [e for e in events if e["ph"] == "i" and e["name"] == "preempted"]
    assert len(preempted) == res.records["preemptions"].sum() > 0
    log = res.request_log
    recomputed = 0
    for rid in range(len(res.records["request_id"])):
        if res.records["status"][rid] != "ok":
            continue
        parts = tracks[(2, rid)]
        chunks = [p for p in parts if p["name"] == "prefill"]
        mine = log["chunk_request"] == rid
        assert [c["args"]["tokens"] for c in chunks] == log["chunk_tokens"][mine].tolist()
        prompt = int(res.records["input_tokens"][rid])
        fresh = sum(c["args"]["tokens"] for c in chunks if not c["args"].get("recompute"))
        again = [c["args"]["tokens"] for c in chunks if c["args"].get("recompute")]
        if res.records["preemptions"][rid] == 0:
            assert (fresh, again) == (prompt, [])  # the prompt, chunk by chunk, once
        else:  # a recompute covers the prompt and what it had generated
            assert fresh <= prompt
            assert sum(again) >= prompt
        recomputed += sum(again)
        # the thread covers arrival to finish without gaps, and decodes after its first token
        assert parts[0]["ts"] == round(res.records["arrival_s"][rid] * 1e6, 3)
        for a, b in itertools.pairwise(parts):
            assert abs(a["ts"] + a["dur"] - b["ts"]) < 1e-2
        # (a request whose last token comes from a chunk ends on it: no decode after)
        assert parts[-1]["name"] in ("decode", "prefill")
        assert abs(parts[-1]["ts"] + parts[-1]["dur"] - res.records["finish_s"][rid] * 1e6) < 1e-2
    assert recomputed > 0
    assert max(int(t) for t in log["chunk_tokens"]) <= 16


def test_logged_trace_is_the_same_fused_and_stepped(make_scenario, tmp_path):
    extra = {"simulation.fuse_iterations": False}
    fused = simulate(make_scenario(DECODE_HEAVY), request_log=True)
    stepped = simulate(make_scenario({**DECODE_HEAVY, **extra}), request_log=True)
    write_trace_events(fused, tmp_path / "a.json")
    write_trace_events(stepped, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
