"""Engine presets (issue 4): SGLang and vLLM launch flags → the simulator's knobs."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from lyra_simpy import ScenarioError, scenario_from_dict, simulate
from lyra_simpy.cli import main
from lyra_simpy.dotted import get_path
from lyra_simpy.presets import apply_engine, parse_command
from lyra_simpy.presets import sglang as sg
from lyra_simpy.presets import vllm as vl

SGLANG_LINE = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --max-running-requests 64 "
    "--chunked-prefill-size 4096 --page-size 16 --mem-fraction-static 0.85 "
    "--cuda-graph-max-bs 64 --schedule-policy lpm"
)
VLLM_LINE = (
    "vllm serve meta-llama/Llama-3.1-8B --max-num-seqs 128 --max-num-batched-tokens 2048 "
    "--enable-prefix-caching --gpu-memory-utilization 0.9"
)
#: SGLang v0.5's captured sizes up to 256 (server_args._generate_cuda_graph_batch_sizes)
SGLANG_SIZES_256 = [1, 2, 4, 8, 12, *range(16, 257, 8)]
#: vLLM's default capture sizes up to 512 (compilation config)
VLLM_SIZES_512 = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


def base(engine: dict[str, Any] | None = None, hardware: str = "h100_sxm") -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "preset",
        "seed": 3,
        "workload": {
            "num_requests": 40,
            "arrival": {"name": "poisson", "rate_per_s": 10.0},
            "input_tokens": {"name": "uniform", "low": 64, "high": 1024},
            "output_tokens": {"name": "uniform", "low": 8, "high": 64},
        },
        "cost": {"name": "roofline", "hardware": hardware, "model": "llama_3_8b"},
    }
    if engine is not None:
        raw["engine"] = engine
    return raw


def resolved(raw: dict[str, Any], overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    return scenario_from_dict(copy.deepcopy(raw), overrides=overrides).resolved()


def error(raw: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(copy.deepcopy(raw))
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# -- command lines ----------------------------------------------------------------------


def test_parse_command_reads_launch_lines():
    line = (
        "CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path m \\\n"
        "  --max-running-requests=64 --enable-mixed-chunk --chunked-prefill-size -1 \\\n"
        "  --cuda-graph-bs 1 2 4 --no-enable-prefix-caching -tp 2  # a comment"
    )
    assert parse_command(line) == {
        "model_path": "m",
        "max_running_requests": 64,
        "enable_mixed_chunk": True,
        "chunked_prefill_size": -1,
        "cuda_graph_bs": [1, 2, 4],
        "enable_prefix_caching": False,
        "tp": 2,
    }


def test_parse_command_flag_given_twice_differently_is_an_error():
    with pytest.raises(ScenarioError, match="flag page_size given twice"):
        parse_command("x --page-size 16 --page-size 32")


@pytest.mark.parametrize(
    "key", ["--chunked-prefill-size", "chunked-prefill-size", "chunked_prefill_size"]
)
def test_flag_spellings_are_one_flag(key):
    raw = base({"name": "sglang", "flags": {key: 2048}})
    got = resolved(raw)
    assert got["scheduler"]["chunked_prefill_size"] == 2048
    assert got["engine"]["flags"] == {"chunked_prefill_size": 2048}


def test_flags_edit_the_command():
    raw = base({"name": "sglang", "command": SGLANG_LINE, "flags": {"max_running_requests": 64}})
    assert resolved(raw)["scheduler"]["max_running_requests"] == 64
    raw["engine"]["flags"] = {"max-running-requests": 32}
    got = resolved(raw)
    assert got["scheduler"]["max_running_requests"] == 32
    assert got["engine"]["flags"]["max_running_requests"] == 32
    raw["engine"]["flags"] = {"page-size": 32, "page_size": 32}
    assert error(raw) == "engine.flags.page_size: given twice (as page-size and page_size)"


# -- SGLang -----------------------------------------------------------------------------


def test_sglang_launch_line_sets_the_knobs():
    got = resolved(base({"name": "sglang", "command": SGLANG_LINE}))
    assert got["scheduler"] == {
        "name": "prefill_first",
        "max_running_requests": 64,
        "chunked_prefill_size": 4096,
        "max_prefill_tokens": 16384,
        "enable_mixed_chunk": False,
        "new_token_ratio": 0.1,
        "clip_max_new_tokens": 4096,
        "schedule_policy": "lpm",
        "lpm_max_queue": 128,
    }
    kv = got["kv_cache"]
    assert (kv["block_size"], kv["mem_fraction"], kv["activation_reserve_gib"]) == (16, 0.85, 0.0)
    assert isinstance(kv["num_blocks"], int)
    assert got["prefix_cache"] == {"name": "radix"}
    assert got["cost"]["padding"] == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    # the manifest keeps the block as given, flags normalised (ignored ones included)
    assert got["engine"]["command"] == SGLANG_LINE
    assert got["engine"]["flags"]["model_path"] == "Qwen/Qwen3-8B"
    assert got["engine"]["name"] == "sglang"


def test_sglang_defaults_on_an_h100():
    got = resolved(base({"name": "sglang"}))
    s = got["scheduler"]
    assert (s["max_running_requests"], s["chunked_prefill_size"]) == (2048, 8192)
    assert (s["schedule_policy"], s["enable_mixed_chunk"]) == ("fcfs", False)
    # 80 GiB: reserved 512 + 1.5 x 8192 + 2 x 256 + 128 = 13 440 MB of 81 920
    assert got["kv_cache"]["mem_fraction"] == round((81920 - 13440) / 81920, 3) == 0.836
    assert got["kv_cache"]["block_size"] == 1
    assert got["prefix_cache"] == {"name": "radix"}
    assert got["cost"]["padding"] == SGLANG_SIZES_256
    assert got["cost"]["kv_dtype"] == "bf16"


@pytest.mark.parametrize(
    ("mem_gib", "tp", "want"),
    [
        (None, 1, (4096, 160)),
        (16, 1, (2048, 8)),
        (24, 1, (2048, 24)),
        (24, 4, (2048, 80)),
        (48, 1, (4096, 32)),
        (48, 8, (4096, 160)),
        (80, 1, (8192, 256)),
        (141, 4, (8192, 512)),
        (180, 1, (16384, 512)),
    ],
)
def test_sglang_gpu_memory_defaults(mem_gib, tp, want):
    assert sg.gpu_defaults(mem_gib, tp) == want


def test_sglang_mem_fraction_default():
    assert sg.mem_fraction_default(None, 8192, 16384, 256, 1) == 0.88
    # below 60 GiB no 10 GiB floor: 512 + 1.5 x 4096 + 64 + 128 = 6848 of 49 152
    assert sg.mem_fraction_default(48, 4096, 16384, 32, 1) == round(1 - 6848 / 49152, 3)
    # chunking off: the prefill budget sizes the activations
    assert sg.mem_fraction_default(80, None, 16384, 256, 1) == round(1 - 25728 / 81920, 3)


def test_sglang_capture_sizes():
    assert sg.capture_sizes(256, 4096) == SGLANG_SIZES_256
    assert sg.capture_sizes(600, 4096)[-6:] == [464, 480, 496, 512, 544, 576]
    assert sg.capture_sizes(64, 50) == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 50]
    assert sg.capture_sizes(5, 100, every=True) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("flags", "path", "want"),
    [
        ({"disable_radix_cache": True}, "prefix_cache", None),
        ({"enable_mixed_chunk": True}, "scheduler.enable_mixed_chunk", True),
        ({"chunked_prefill_size": -1}, "scheduler.chunked_prefill_size", None),
        ({"max_prefill_tokens": 8192}, "scheduler.max_prefill_tokens", 8192),
        ({"schedule_conservativeness": 3}, "scheduler.new_token_ratio", 0.30000000000000004),
        ({"disable_cuda_graph": True}, "cost.padding", "none"),
        ({"cuda_graph_bs": [1, 8, 64]}, "cost.padding", [1, 8, 64]),
        (
            {"cuda_graph_max_bs": 4, "disable_cuda_graph_padding": True},
            "cost.padding",
            [1, 2, 3, 4],
        ),
        ({"kv_cache_dtype": "fp8_e5m2"}, "cost.kv_dtype", "fp8"),
        ({"kv_cache_dtype": "fp8_e4m3"}, "cost.kv_dtype", "fp8"),
        ({"kv_cache_dtype": "auto"}, "cost.kv_dtype", "bf16"),
        ({"tp_size": 2}, "cost.tp", 2),
        ({"tp": 4}, "cost.tp", 4),
        ({"quantization": "fp8"}, "cost.weight_dtype", "fp8"),
        ({"host": "0.0.0.0", "port": 30000}, "scheduler.name", "prefill_first"),
    ],
)
def test_sglang_flag_mappings(flags, path, want):
    assert get_path(resolved(base({"name": "sglang", "flags": flags})), path) == want


def test_fp8_kv_doubles_the_pool():
    bf16 = resolved(base({"name": "sglang"}))["kv_cache"]["num_blocks"]
    fp8 = resolved(base({"name": "sglang", "flags": {"kv_cache_dtype": "fp8_e5m2"}}))
    assert fp8["kv_cache"]["num_blocks"] == pytest.approx(2 * bf16, rel=1e-4)


@pytest.mark.parametrize(
    "flag",
    ["speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"],
)
def test_speculative_flags_need_the_algorithm(flag):
    raw = base({"name": "sglang", "flags": {flag: 3}})
    assert error(raw) == f"engine.flags.{flag}: got 3, must come with --speculative-algorithm"


def test_speculative_acceptance_must_come_from_the_scenario():
    raw = base({"name": "sglang", "flags": {"speculative-algorithm": "NEXTN"}})
    assert error(raw) == (
        "engine.flags.speculative_algorithm: got 'NEXTN'; acceptance is not a launch flag: "
        "set speculative.mean_accepted_tokens (or speculative.acceptance_rates) in the scenario"
    )


def test_sglang_speculative_flags_set_the_draft():
    flags = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 2,
             "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 3}  # fmt: skip
    raw = base({"name": "sglang", "flags": flags})
    raw["speculative"] = {"mean_accepted_tokens": 1.5}
    spec = resolved(raw)["speculative"]
    assert (spec["algorithm"], spec["num_steps"], spec["mean_accepted_tokens"]) == (
        "NEXTN", 2, 1.5,
    )  # fmt: skip
    raw = base({"name": "sglang", "flags": {**flags, "speculative-eagle-topk": 4}})
    raw["speculative"] = {"mean_accepted_tokens": 1.5}
    assert error(raw).startswith("engine.flags.speculative_eagle_topk: got 4, must be 1")


def test_vllm_speculative_config_sets_the_draft():
    for config in ('{"method": "mtp", "num_speculative_tokens": 2}',
                   {"method": "mtp", "num_speculative_tokens": 2, "model": "x/y"}):  # fmt: skip
        raw = base({"name": "vllm", "flags": {"speculative_config": config}})
        raw["speculative"] = {"acceptance_rates": [0.8, 0.6]}
        spec = resolved(raw)["speculative"]
        assert (spec["algorithm"], spec["num_steps"]) == ("mtp", 2)
    command = 'vllm serve m --speculative-config \'{"model": "d", "num_speculative_tokens": 4}\''
    raw = base({"name": "vllm", "command": command})
    raw["speculative"] = {"mean_accepted_tokens": 2.0}
    spec = resolved(raw)["speculative"]
    assert (spec["algorithm"], spec["num_steps"]) == ("draft_model", 4)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{not json", "engine.flags.speculative_config: got '{not json', must be a JSON object"),
        ({"method": "eagle"}, "speculative_config.num_speculative_tokens: got None, must be"),
        ({"num_speculative_tokens": 3}, "speculative_config.method: got None, must name"),
        (
            {"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": "[]"},
            "engine.flags.speculative_config.speculative_token_tree: not modelled; known: ",
        ),
        (
            {"method": "eagle", "num_speculative_tokens": 3, "disable_by_batch_size": 8},
            "engine.flags.speculative_config.disable_by_batch_size: not modelled",
        ),
    ],
)
def test_bad_vllm_speculative_config_is_one_line(config, message):
    raw = base({"name": "vllm", "flags": {"speculative_config": config}})
    raw["speculative"] = {"mean_accepted_tokens": 1.0}
    assert message in error(raw)


def test_vllm_speculative_config_needs_acceptance_and_v0_flags_are_refused():
    mtp = {"method": "mtp", "num_speculative_tokens": 1}
    raw = base({"name": "vllm", "flags": {"speculative_config": mtp}})
    assert "engine.flags.speculative_config: got 'mtp'; acceptance is not a launch flag" in (
        error(raw)
    )
    raw = base({"name": "vllm", "flags": {"num_speculative_tokens": 3}})
    assert error(raw).startswith("engine.flags.num_speculative_tokens: got 3, a vLLM V0 flag")
    raw = base(
        {"name": "vllm", "flags": {"speculative_config": {**mtp, "num_speculative_tokens": 2}}}
    )
    raw["speculative"] = {"num_steps": 3, "mean_accepted_tokens": 1.0}
    assert error(raw).startswith(
        "speculative.num_steps: got 3, but engine.flags.speculative_config"
    )


def test_unknown_flag_names_it_and_lists_the_known_ones():
    msg = error(base({"name": "sglang", "flags": {"--max-runing-requests": 8}}))
    assert msg.startswith("engine.flags.max_runing_requests: unknown sglang flag; known: ")
    assert "max_running_requests" in msg
    assert "ignored, no effect on the simulation: " in msg
    assert "host" in msg


@pytest.mark.parametrize(
    ("engine", "want"),
    [
        ({"name": "tgi"}, "engine.name: got 'tgi', must be one of ['llamacpp', 'sglang', 'vllm']"),
        ("sglang", "engine: got 'sglang', must be a mapping with name and flags"),
        ({"name": "vllm", "flag": {}}, "engine.flag: unknown field"),
        ({"name": "vllm", "flags": [1]}, "engine.flags: got [1], must be a mapping"),
        ({"name": "vllm", "command": 3}, "engine.command: got 3, must be a launch command"),
        ({"name": "sglang", "flags": {"page_size": 0}}, "engine.flags.page_size: got 0, must be"),
        ({"name": "sglang", "flags": {"schedule_policy": "dfs-weight"}}, "engine.flags.schedul"),
        ({"name": "sglang", "flags": {"chunked_prefill_size": -4}}, "must be > 0 or -1 (off)"),
        ({"name": "sglang", "flags": {"kv_cache_dtype": "int4"}}, "must be one of ['auto',"),
        ({"name": "vllm", "flags": {"scheduling_policy": "priority"}}, "must be 'fcfs'"),
        ({"name": "vllm", "flags": {"quantization": "awq"}}, "must be one of ['fp8']"),
    ],
)
def test_bad_engine_blocks_fail_in_one_line(engine, want):
    assert want in error(base(engine))


# -- vLLM -------------------------------------------------------------------------------


def test_vllm_launch_line_sets_the_knobs():
    got = resolved(base({"name": "vllm", "command": VLLM_LINE}))
    assert got["scheduler"] == {
        "name": "chunked_prefill",
        "max_num_seqs": 128,
        "max_num_batched_tokens": 2048,
        "queue_policy": "fcfs",
        "long_prefill_token_threshold": 0,
    }
    kv = got["kv_cache"]
    assert (kv["block_size"], kv["mem_fraction"], kv["activation_reserve_gib"]) == (16, 0.9, 3.5)
    assert got["prefix_cache"] == {"name": "block_hash", "eviction": "free_queue"}
    assert got["cost"]["padding"] == [s for s in VLLM_SIZES_512 if s <= 256]


@pytest.mark.parametrize(
    ("hardware", "seqs", "budget"),
    [("h100_sxm", 1024, 8192), ("h200_sxm", 1024, 8192), ("a100_sxm", 256, 2048)],
)
def test_vllm_defaults_follow_the_device(hardware, seqs, budget):
    got = resolved(base({"name": "vllm"}, hardware))
    assert got["scheduler"]["name"] == "chunked_prefill"
    assert got["scheduler"]["max_num_seqs"] == seqs
    assert got["scheduler"]["max_num_batched_tokens"] == budget
    assert got["kv_cache"]["block_size"] == 16
    assert got["kv_cache"]["mem_fraction"] == 0.9
    assert got["prefix_cache"] == {"name": "block_hash", "eviction": "free_queue"}
    assert got["cost"]["padding"] == [s for s in VLLM_SIZES_512 if s <= min(2 * seqs, 512)]


def test_vllm_without_chunking_runs_continuous():
    flags = {"no-enable-chunked-prefill": True}
    with pytest.raises(ScenarioError, match="unknown vllm flag"):
        scenario_from_dict(base({"name": "vllm", "flags": flags}))
    line = "vllm serve m --no-enable-chunked-prefill --max-model-len 4096"
    got = resolved(base({"name": "vllm", "command": line}))
    assert got["scheduler"]["name"] == "continuous"
    assert got["scheduler"]["max_num_batched_tokens"] == 4096
    assert "long_prefill_token_threshold" not in got["scheduler"]
    raw = base({"name": "vllm", "flags": {"enable_chunked_prefill": False}})
    assert resolved(raw)["scheduler"]["max_num_batched_tokens"] == vl.NO_CHUNKING_BUDGET
    raw["engine"]["flags"]["long_prefill_token_threshold"] = 256
    assert "only used with enable_chunked_prefill: true" in error(raw)


@pytest.mark.parametrize(
    ("flags", "path", "want"),
    [
        ({"enable_prefix_caching": False}, "prefix_cache", None),
        ({"enforce_eager": True}, "cost.padding", "none"),
        ({"max_cudagraph_capture_size": 16}, "cost.padding", [1, 2, 4, 8, 16]),
        ({"block_size": 32}, "kv_cache.block_size", 32),
        ({"gpu_memory_utilization": 0.8}, "kv_cache.mem_fraction", 0.8),
        ({"long_prefill_token_threshold": 512}, "scheduler.long_prefill_token_threshold", 512),
        ({"kv_cache_dtype": "fp8"}, "cost.kv_dtype", "fp8"),
        ({"tensor_parallel_size": 2}, "cost.tp", 2),
        ({"max_num_batched_tokens": 512}, "scheduler.max_num_seqs", 512),
    ],
)
def test_vllm_flag_mappings(flags, path, want):
    assert get_path(resolved(base({"name": "vllm", "flags": flags})), path) == want


def test_vllm_capture_sizes():
    assert vl.capture_sizes(512) == VLLM_SIZES_512
    assert vl.capture_sizes(3) == [1, 2]


# -- precedence -------------------------------------------------------------------------


def test_scenario_keys_win_over_engine_defaults():
    raw = base({"name": "vllm"})
    raw["scheduler"] = {"max_num_seqs": 64}
    raw["kv_cache"] = {"block_size": 16, "num_blocks": 4000}
    raw["prefix_cache"] = None
    got = resolved(raw)
    assert got["scheduler"]["max_num_seqs"] == 64
    assert got["scheduler"]["max_num_batched_tokens"] == 8192  # the engine default
    assert got["kv_cache"] == {
        "block_size": 16,
        "num_blocks": 4000,
        "mem_fraction": None,
        "activation_reserve_gib": None,
        "reserved_blocks": 1,  # V1's null block, which the preset always sets
    }
    assert got["prefix_cache"] is None


def test_scenario_keys_equal_to_given_flags_are_fine():
    raw = base({"name": "sglang", "command": SGLANG_LINE})
    raw["scheduler"] = {"name": "prefill_first", "max_running_requests": 64}
    assert resolved(raw)["scheduler"]["max_running_requests"] == 64


def test_scenario_keys_against_given_flags_are_an_error():
    raw = base({"name": "sglang", "command": SGLANG_LINE})
    raw["scheduler"] = {"max_running_requests": 32}
    assert error(raw) == (
        "scheduler.max_running_requests: got 32, but engine.flags.max_running_requests: 64 "
        "sets it to 64; remove one of them"
    )
    raw = base({"name": "sglang", "flags": {"disable_radix_cache": True}})
    raw["prefix_cache"] = {"name": "radix"}
    assert error(raw).startswith("prefix_cache: got {'name': 'radix'}, but engine.flags.disable")
    raw = base({"name": "vllm", "flags": {"gpu_memory_utilization": 0.8}})
    raw["kv_cache"] = {"num_blocks": 5000}
    assert error(raw) == (
        "kv_cache.num_blocks: got 5000, but engine.flags.gpu_memory_utilization: 0.8 sizes "
        "the KV pool from memory (num_blocks: auto); remove one of them"
    )


def test_scheduler_kind_is_the_engines():
    raw = base({"name": "sglang"})
    raw["scheduler"] = {"name": "continuous"}
    assert error(raw) == (
        "scheduler.name: got 'continuous', engine sglang runs 'prefill_first'; remove "
        "scheduler.name (or change the engine flags)"
    )
    raw = base({"name": "vllm", "flags": {"enable_chunked_prefill": True}})
    raw["scheduler"] = {"name": "continuous"}
    assert "engine vllm with enable_chunked_prefill: True runs 'chunked_prefill'" in error(raw)


def test_other_cost_models_need_blocks_and_refuse_roofline_only_flags():
    raw = base({"name": "vllm"})
    raw["cost"] = {"name": "linear", "base_ms": 10}
    assert error(raw).startswith("kv_cache.num_blocks: required with engine and cost 'linear'")
    raw["kv_cache"] = {"num_blocks": 2000}
    got = resolved(raw)
    assert (got["scheduler"]["max_num_seqs"], got["scheduler"]["max_num_batched_tokens"]) == (
        256,
        2048,
    )  # vLLM's defaults for an unknown device
    assert got["cost"]["padding"][-1] == 512  # min(2 x 256, 512)
    raw["engine"]["flags"] = {"kv_cache_dtype": "fp8"}
    assert error(raw).startswith(
        "engine.flags.kv_cache_dtype: got 'fp8', which only the roofline cost model"
    )
    raw["engine"]["flags"] = {"kv_cache_dtype": "auto", "tensor_parallel_size": 1}
    assert resolved(raw)["cost"]["name"] == "linear"
    del raw["kv_cache"]
    raw["engine"] = {"name": "sglang", "flags": {"mem_fraction_static": 0.8}}
    assert error(raw).startswith("engine.flags.mem_fraction_static: got 0.8, sizes the KV pool")


def test_apply_engine_is_pure_and_a_no_op_without_an_engine():
    raw = base()
    assert apply_engine(raw) is raw
    raw = base({"name": "vllm", "flags": {"--max-num-seqs": 8}})
    before = copy.deepcopy(raw)
    out = apply_engine(raw)
    assert raw == before
    assert out["scheduler"]["max_num_seqs"] == 8


def test_overrides_and_variants_rederive_from_the_flags():
    raw = base({"name": "sglang", "command": SGLANG_LINE})
    got = resolved(raw, ("engine.flags.cuda-graph-max-bs=16",))
    assert got["cost"]["padding"] == [1, 2, 4, 8, 12, 16]
    raw["variants"] = [
        {"label": "mrr32", "set": {"engine.flags.max_running_requests": 32}},
        {"label": "mixed", "set": {"engine.flags.enable_mixed_chunk": True}},
    ]
    runs = {s.label: s for s in scenario_from_dict(raw).expand()}
    assert runs["mrr32"].scheduler.max_running_requests == 32
    assert runs["mrr32"].cost.padding[-1] == 32  # graphs cut at the running limit
    assert runs["mixed"].scheduler.enable_mixed_chunk is True
    raw["variants"] = [{"label": "clash", "set": {"scheduler.max_running_requests": 8}}]
    with pytest.raises(ScenarioError, match=r"^variants\['clash'\]\.scheduler\.max_running"):
        scenario_from_dict(raw)


# -- end to end -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine", [{"name": "sglang", "command": SGLANG_LINE}, {"name": "vllm", "command": VLLM_LINE}]
)
def test_each_preset_runs_end_to_end(engine):
    results = simulate(scenario_from_dict(base(engine)))
    assert results.summary["completed"] == 40
    assert results.summary["median_tpot_ms"] > 0


def test_cli_validate_reports_the_speculative_flag(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "workload: {num_requests: 4, arrival: {name: poisson, rate_per_s: 1},\n"
        "  input_tokens: {name: fixed, tokens: 16}, output_tokens: {name: fixed, tokens: 4}}\n"
        "cost: {name: roofline, hardware: h100_sxm, model: llama_3_8b}\n"
        "engine:\n  name: sglang\n"
        "  command: python -m sglang.launch_server --speculative-algorithm NEXTN\n"
    )
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lyra-simpy: engine.flags.speculative_algorithm: got 'NEXTN'; acceptance is not a "
        "launch flag: set speculative.mean_accepted_tokens (or speculative.acceptance_rates) "
        "in the scenario"
    ]


def test_pool_size_flags_set_the_blocks():
    raw = base({"name": "sglang", "flags": {"max_total_tokens": 100_000, "page_size": 16}})
    kv = resolved(raw)["kv_cache"]
    assert (kv["num_blocks"], kv["block_size"], kv["mem_fraction"]) == (6250, 16, None)
    raw["cost"] = {"name": "linear", "base_ms": 10}  # no memory rule needed then
    assert resolved(raw)["kv_cache"]["num_blocks"] == 6250
    raw["kv_cache"] = {"num_blocks": 6000}
    assert error(raw).startswith(
        "kv_cache.num_blocks: got 6000, but engine.flags.max_total_tokens: 100000 sets it to 6250"
    )
    raw = base({"name": "vllm", "command": "vllm serve m --num-gpu-blocks-override 3000"})
    assert resolved(raw)["kv_cache"]["num_blocks"] == 3000


@pytest.mark.parametrize(
    "line", ["--speculative-model m --num-speculative-tokens 3", "--num-speculative-tokens 3"]
)
def test_vllm_older_speculative_flags_are_errors(line):
    raw = base({"name": "vllm", "command": f"vllm serve m {line}"})
    assert ", a vLLM V0 flag; V1 takes --speculative-config" in error(raw)


def test_flags_read_from_yaml_with_dashes_and_bare_switches():
    block = yaml.safe_load(
        "name: sglang\nflags: {--enable-mixed-chunk: , --page-size: 16, disable-radix-cache:}"
    )
    got = resolved(base(block))
    assert got["scheduler"]["enable_mixed_chunk"] is True
    assert got["kv_cache"]["block_size"] == 16
    assert got["prefix_cache"] is None


def test_sglang_hybrid_models_need_the_running_limit():
    raw = base({"name": "sglang"})
    raw["cost"]["model"] = "qwen3_5_4b"
    assert error(raw).startswith(
        "engine.flags.max_running_requests: required with the hybrid model 'qwen3_5_4b'"
    )
    raw["engine"]["flags"] = {"max_running_requests": 256}
    assert resolved(raw)["scheduler"]["max_running_requests"] == 256


# -- the mamba state strategy (hybrid models) ----------------------------------------------

HYBRID_SPEC = (
    "python -m sglang.launch_server --model-path Qwen/Qwen3.5-4B --max-running-requests 16 "
    "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4"
)


def hybrid(command: str) -> dict[str, Any]:
    raw = base({"name": "sglang", "command": command}, hardware="b200")
    raw["cost"]["model"] = "qwen3_5_4b"
    raw["speculative"] = {"acceptance_rates": [0.8, 0.7, 0.6]}
    return raw


def test_the_launch_line_with_extra_buffer_is_accepted_whole():
    line = (
        f"{HYBRID_SPEC} --mamba-scheduler-strategy extra_buffer --mamba-track-interval 128 "
        "--mamba-full-memory-ratio 0.8 --max-mamba-cache-size 64 --mamba-ssm-dtype float32"
    )
    got = resolved(hybrid(line))
    assert got["engine"]["flags"]["mamba_scheduler_strategy"] == "extra_buffer"
    assert got["prefix_cache"] == {"name": "radix"}
    # the sizing flags change nothing simulated: the same KV pool as without them
    plain = resolved(hybrid(f"{HYBRID_SPEC} --mamba-scheduler-strategy extra_buffer"))
    assert got["kv_cache"] == plain["kv_cache"]
    # SGLang's newer spelling
    renamed = resolved(hybrid(f"{HYBRID_SPEC} --mamba-radix-cache-strategy extra_buffer"))
    assert renamed["engine"]["flags"]["mamba_scheduler_strategy"] == "extra_buffer"


def test_no_buffer_with_speculation_and_the_radix_cache_is_refused_as_sglang_does():
    expected = (
        "engine.flags.mamba_scheduler_strategy: got 'no_buffer' (SGLang's default), which "
        "SGLang refuses with speculative decoding and the radix cache on a hybrid model"
    )
    assert error(hybrid(HYBRID_SPEC)).startswith(expected)
    line = f"{HYBRID_SPEC} --mamba-scheduler-strategy no_buffer"
    assert error(hybrid(line)).startswith(
        "engine.flags.mamba_scheduler_strategy: got 'no_buffer', which SGLang refuses"
    )
    # without the radix cache, or without speculation, no_buffer runs
    assert resolved(hybrid(f"{line} --disable-radix-cache"))["prefix_cache"] is None
    raw = hybrid(line.split(" --speculative")[0] + " --mamba-scheduler-strategy no_buffer")
    del raw["speculative"]
    assert resolved(raw)["prefix_cache"] == {"name": "radix"}
    # auto picks extra_buffer when both are on
    assert resolved(hybrid(f"{HYBRID_SPEC} --mamba-scheduler-strategy auto"))["prefix_cache"]


def test_mamba_strategy_choices_and_non_hybrid_models():
    msg = error(hybrid(f"{HYBRID_SPEC} --mamba-scheduler-strategy extra"))
    assert msg.startswith("engine.flags.mamba_scheduler_strategy: got 'extra'")
    # a model without state layers: the flag is accepted and changes nothing
    with_flag = resolved(
        base({"name": "sglang", "flags": {"mamba-scheduler-strategy": "no_buffer"}})
    )
    without = resolved(base({"name": "sglang"}))
    assert with_flag["engine"]["flags"] == {"mamba_scheduler_strategy": "no_buffer"}
    assert {**with_flag, "engine": None} == {**without, "engine": None}
    f = sg.SGLangFlags(mamba_scheduler_strategy="auto")
    assert sg.mamba_strategy(f, hybrid(HYBRID_SPEC), speculative=True) == "extra_buffer"
    assert sg.mamba_strategy(f, hybrid(HYBRID_SPEC), speculative=False) == "no_buffer"
    assert sg.mamba_strategy(f, base(), speculative=True) is None
