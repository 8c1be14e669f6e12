"""`validate` warns when the workload can draw requests that can never be served
(issue 13): a prompt larger than the KV pool, a prompt larger than the token budget
without chunking, a prompt plus output larger than the pool."""

from __future__ import annotations

import yaml

from builders import trace_workload
from lyra_simpy.cli import main
from lyra_simpy.servable import max_tokens, never_served

CHUNKED = {"name": "chunked_prefill", "max_num_seqs": 4, "max_num_batched_tokens": 64}

# TINY: 64 blocks x 8 tokens = 512-token pool, budget 256, prompts <= 40, outputs <= 24.


def test_tiny_scenario_has_no_warning(make_scenario):
    assert never_served(make_scenario()) == []


def test_prompt_larger_than_the_pool(make_scenario):
    sc = make_scenario({"workload.input_tokens": {"name": "fixed", "tokens": 600}})
    [line] = never_served(sc)
    assert line.startswith("workload.input_tokens: prompts of up to 600 tokens exceed the KV pool")
    assert "512 tokens" in line


def test_prompt_larger_than_the_budget_without_chunking(make_scenario):
    sc = make_scenario({"workload.input_tokens": {"name": "uniform", "low": 10, "high": 300}})
    [line] = never_served(sc)
    assert "prompts of up to 300 tokens exceed the token budget" in line
    assert "max_num_batched_tokens: 256" in line
    assert "without chunked prefill" in line


def test_chunked_prefill_takes_prompts_beyond_the_budget(make_scenario):
    sc = make_scenario(
        {
            "scheduler": {
                "name": "chunked_prefill",
                "max_num_seqs": 4,
                "max_num_batched_tokens": 64,
            },
            "workload.input_tokens": {"name": "fixed", "tokens": 300},
        }
    )
    assert never_served(sc) == []


def test_prompt_plus_output_larger_than_the_pool(make_scenario):
    sc = make_scenario(
        {
            "scheduler": {
                "name": "chunked_prefill",
                "max_num_seqs": 4,
                "max_num_batched_tokens": 64,
            },
            "workload.input_tokens": {"name": "fixed", "tokens": 400},
            "workload.output_tokens": {"name": "lognormal", "mean": 50, "sigma": 1, "max": 200},
        }
    )
    [line] = never_served(sc)
    assert line.startswith("workload: prompt + output of up to 600 tokens can exceed")
    assert "KV pool 512 tokens" in line


def test_unbounded_distribution_is_not_checked(make_scenario):
    dist = {"name": "lognormal", "mean": 5000, "sigma": 1}
    assert never_served(make_scenario({"workload.input_tokens": dist})) == []


def test_bounds_of_mixture_and_empirical(make_scenario, tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,5,3\n1,70,2\n")
    emp = {"name": "empirical", "path": "t.csv", "format": "csv", "field": "input"}
    mix = {
        "name": "mixture",
        "components": [
            {"weight": 1, "dist": emp},
            {"weight": 1, "dist": {"name": "normal", "mean": 9, "std": 1, "max": 50}},
        ],
    }
    sc = make_scenario({"workload.input_tokens": mix}, base_dir=tmp_path)
    assert max_tokens(sc.workload.input_tokens, sc.workload, tmp_path, "input") == 70


def test_validate_prints_a_warning_line_and_exits_0(tmp_path, tiny_raw, capsys):
    tiny_raw["workload"]["input_tokens"] = {"name": "fixed", "tokens": 600}
    tiny_raw["variants"] = [
        {"label": "small", "set": {"kv_cache.num_blocks": 64}},
        {
            "label": "big",
            "set": {"kv_cache.num_blocks": 128, "scheduler.max_num_batched_tokens": 1024},
        },
    ]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_raw))
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"{path}: ok (2 run(s))"
    [line] = captured.err.splitlines()
    assert line.startswith(
        f"lyra-simpy: warning: {path}: workload.input_tokens: prompts of up to 600"
    )
    assert line.endswith("(runs: small)")


def test_trace_lengths_bounded_by_the_replayed_rows(make_scenario, tmp_path):
    changes = trace_workload(tmp_path, [(0.0, 700, 2), (1.0, 10, 2)])
    [line] = never_served(make_scenario(changes, base_dir=tmp_path))
    assert "prompts of up to 700 tokens" in line
    changes["workload.arrival"] = {**changes["workload.arrival"], "skip_rows": 1}
    assert never_served(make_scenario(changes, base_dir=tmp_path)) == []
