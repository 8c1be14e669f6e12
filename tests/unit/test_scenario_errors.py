"""Scenario loading: one-line errors naming path, value and what is allowed; overrides,
quick blocks, variants and grids."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from lyra_simpy import Scenario, ScenarioError, load_scenario, scenario_from_dict
from lyra_simpy.dotted import deep_merge, parse_override, set_path
from lyra_simpy.errors import TraceError
from lyra_simpy.live.profile_grid import load_grid


@pytest.fixture
def error_of(tiny_raw):
    """The one-line error of the tiny scenario with *changes* (and *delete*d paths)."""

    def get(changes: dict[str, Any], delete: tuple[str, ...] = ()) -> str:
        return _error_of(copy.deepcopy(tiny_raw), changes, delete)

    return get


def _error_of(raw: dict[str, Any], changes: dict[str, Any], delete: tuple[str, ...]) -> str:
    for path, value in changes.items():
        set_path(raw, path, value)
    for path in delete:
        *head, last = path.split(".")
        node = raw
        for key in head:
            node = node[key]
        del node[last]
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    msg = str(info.value)
    assert "\n" not in msg, "errors are one line"
    assert "Traceback" not in msg
    return msg


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"scheduler.max_num_seqs": 0}, "scheduler.continuous.max_num_seqs: got 0, must be "),
        ({"scheduler.max_num_seqs": "many"}, "scheduler.continuous.max_num_seqs: got 'many', "),
        ({"kv_cache.num_blocks": -3}, "kv_cache.num_blocks: got -3, must be greater than 0"),
        ({"workload.arrival.rate_per_s": 0}, "workload.arrival.poisson.rate_per_s: got 0, "),
        (
            {"workload.arrival": {"name": "closed_loop", "concurrency": 0}},
            "workload.arrival.closed_loop.concurrency: got 0, must be greater than 0",
        ),
        (
            {"scheduler": {"name": "static", "max_wait_ms": -5}},
            "scheduler.static.max_wait_ms: got -5, must be greater than or equal to 0",
        ),
        ({"slo.ttft_ms": -1}, "slo.ttft_ms: got -1, must be greater than 0"),
        ({"cost.base_ms": -1}, "cost.linear.base_ms: got -1, must be greater than or equal to 0"),
        ({"simulation.until_s": 0}, "simulation.until_s: got 0, must be greater than 0"),
        (
            {
                "workload.input_tokens": {
                    "name": "mixture",
                    "components": [{"weight": 0, "dist": {"name": "fixed", "tokens": 3}}],
                }
            },
            "workload.input_tokens.mixture.components[0].weight: got 0, must be greater than 0",
        ),
        (
            {"figures": [{"name": "cdf"}, {"name": "histogram"}]},
            "figures[1].name: got 'histogram', must be ",
        ),
        # a figure block is checked per kind when the scenario loads, not after the run
        (
            {"figures": [{"name": "pareto", "metrics": ["output_throughput"]}]},
            "figures[0]: pareto needs metrics: [x, y] (two), got 1",
        ),
        (
            {"figures": [{"name": "metrics_vs_param", "metrics": ["request_goodput"]}]},
            "figures[0]: metrics_vs_param needs param (a dotted scenario path) and metrics",
        ),
        (
            {"figures": [{"name": "timeline", "metrics": ["p99_ttft_ms"]}]},
            "figures[0]: timeline does not use metrics (it takes: title, variant)",
        ),
        (
            {"figures": [{"name": "cdf", "metric": "p99_ttft_ms"}]},
            "figures[0]: metric: got 'p99_ttft_ms', must be one of ['ttft_ms', 'tpot_ms', ",
        ),
        (
            {"figures": [{"name": "grouped_bars"}]},
            "figures[0]: grouped_bars needs metrics (one panel each)",
        ),
        (
            {
                "figures": [
                    {
                        "name": "metrics_vs_param",
                        "param": "seed",
                        "metrics": ["a"],
                        "reference": "b",
                    }
                ]
            },
            "figures[0]: reference needs series",
        ),
    ],
)
def test_bad_value_names_path_value_and_rule(error_of, changes, expected):
    assert error_of(changes).startswith(expected)


def test_unknown_field_top_level_and_nested(error_of):
    assert error_of({"bogus": 1}).startswith("bogus: unknown field")
    msg = error_of({"scheduler.max_num_seq": 8})
    assert msg.startswith("scheduler.continuous.max_num_seq: unknown field")
    assert "lyra-simpy schema" in msg
    assert error_of({"kv_cache.blocks": 8}).startswith("kv_cache.blocks: unknown field")


def test_unknown_scheduler_lists_allowed_names(error_of):
    msg = error_of({"scheduler.name": "fancy"})
    assert msg.startswith("scheduler: got 'fancy', must be one of ")
    assert "'static'" in msg
    assert "'continuous'" in msg


def test_unknown_kind_elsewhere_lists_allowed_names(error_of):
    msg = error_of({"workload.arrival.name": "bursty"})
    assert msg.startswith("workload.arrival: got 'bursty', must be one of ")
    for name in ("poisson", "gamma", "constant", "closed_loop", "trace"):
        assert repr(name) in msg
    msg = error_of({"cost.name": "magic"})
    assert msg.startswith("cost: got 'magic', must be one of ")
    assert "'linear'" in msg


def test_missing_kind_name(error_of):
    msg = error_of({"workload.arrival": {"rate_per_s": 1}})
    assert msg == "workload.arrival: needs a 'name' field choosing the kind"


def test_budget_below_max_num_seqs(error_of):
    msg = error_of({"scheduler.max_num_seqs": 8, "scheduler.max_num_batched_tokens": 4})
    assert msg.startswith("scheduler.continuous: ")
    assert "max_num_batched_tokens (4) must be >= max_num_seqs (8)" in msg


def test_uniform_high_below_low(error_of):
    msg = error_of({"workload.input_tokens": {"name": "uniform", "low": 10, "high": 5}})
    assert msg.startswith("workload.input_tokens.uniform: ")
    assert msg.endswith("high (5) must be >= low (10)")


def test_clipped_max_below_min(error_of):
    dist = {"name": "lognormal", "mean": 10, "sigma": 1, "min": 10, "max": 5}
    msg = error_of({"workload.output_tokens": dist})
    assert msg.startswith("workload.output_tokens.lognormal: ")
    assert msg.endswith("max (5) must be >= min (10)")


def test_missing_num_requests_and_duration(error_of):
    msg = error_of({}, delete=("workload.num_requests",))
    assert msg.startswith("workload: ")
    assert msg.endswith("set num_requests or duration_s (or both)")
    assert error_of(
        {"workload.arrival": {"name": "closed_loop", "concurrency": 2}, "workload.duration_s": 5},
        delete=("workload.num_requests",),
    ).endswith("closed_loop needs num_requests or a path (duration_s may stop it earlier)")


def test_missing_required_section(error_of):
    assert error_of({}, delete=("kv_cache",)) == "kv_cache: required field is missing"
    assert error_of({}, delete=("kv_cache.num_blocks",)) == (
        "kv_cache.num_blocks: required field is missing"
    )


def test_trace_lengths_need_trace_arrival(error_of):
    msg = error_of({"workload.input_tokens": {"name": "trace"}})
    assert msg.endswith("length 'trace' needs arrival.name 'trace', or 'closed_loop' with a path")


def test_long_values_are_shortened(error_of):
    msg = error_of({"scheduler.max_num_seqs": "x" * 500})
    assert len(msg) < 250


def test_bad_padding_names_the_field_and_all_allowed_forms(error_of):
    msg = error_of({"cost.padding": "sometimes"})
    assert msg.startswith("cost.linear.padding: got 'sometimes', ")
    assert "list" in msg


def test_variants_and_grid_together(tiny_raw):
    raw = tiny_raw
    raw["variants"] = [{"label": "a"}]
    raw["grid"] = {"path": "seed", "values": [1]}
    with pytest.raises(
        ScenarioError, match="use one of variants, grid and whatif, not variants and grid"
    ):
        scenario_from_dict(raw)


# -- overrides --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("scheduler.max_num_seqs=64", ("scheduler.max_num_seqs", 64)),
        (" seed = 3 ", ("seed", 3)),
        ("cost.padding=[1, 2, 4]", ("cost.padding", [1, 2, 4])),
        ("cost.padding=none", ("cost.padding", "none")),
        ("slo.ttft_ms=250.5", ("slo.ttft_ms", 250.5)),
        ("slo.ttft_ms=null", ("slo.ttft_ms", None)),
        ("name=a=b", ("name", "a=b")),
        (
            "scheduler={name: static, max_batch: 2}",
            ("scheduler", {"name": "static", "max_batch": 2}),
        ),
    ],
)
def test_parse_override(text, parsed):
    assert parse_override(text) == parsed


@pytest.mark.parametrize("text", ["scheduler.max_num_seqs", "=3", " =3"])
def test_parse_override_needs_path_and_value(text):
    with pytest.raises(ScenarioError, match=r"^--set: got .*, must be path=value$"):
        parse_override(text)


def test_parse_override_invalid_yaml():
    with pytest.raises(
        ScenarioError, match=r"^--set cost.padding: value '\[1, 2' is not valid YAML"
    ):
        parse_override("cost.padding=[1, 2")


def test_set_path_creates_mappings_and_refuses_non_mappings():
    raw: dict[str, Any] = {"a": {"b": 1}, "x": 5}
    set_path(raw, "a.c.d", 2)
    set_path(raw, "a.b", 3)
    assert raw == {"a": {"b": 3, "c": {"d": 2}}, "x": 5}
    with pytest.raises(ScenarioError, match=r"^--set: x.y: 'x' is 5, not a mapping$"):
        set_path(raw, "x.y", 1)
    with pytest.raises(ScenarioError, match="must be a dotted path"):
        set_path(raw, "a..b", 1)


def test_overrides_apply_before_validation(tiny_raw):
    sc = scenario_from_dict(tiny_raw, overrides=["scheduler.max_num_seqs=2", "seed=99"])
    assert sc.scheduler.max_num_seqs == 2
    assert sc.seed == 99
    with pytest.raises(ScenarioError, match=r"^scheduler.continuous.max_num_seqs: got 0"):
        scenario_from_dict(tiny_raw, overrides=["scheduler.max_num_seqs=0"])


# -- quick blocks -----------------------------------------------------------------------


def test_quick_block_deep_merges(tiny_raw):
    tiny_raw["quick"] = {"workload": {"num_requests": 3}, "kv_cache": {"num_blocks": 9}}
    full = scenario_from_dict(tiny_raw)
    quick = scenario_from_dict(tiny_raw, quick=True)
    assert full.workload.num_requests == 12
    assert quick.workload.num_requests == 3
    assert quick.kv_cache.num_blocks == 9
    # siblings survive the merge
    assert quick.workload.arrival == full.workload.arrival
    assert quick.kv_cache.block_size == full.kv_cache.block_size
    # overrides win over the quick block
    sc = scenario_from_dict(tiny_raw, quick=True, overrides=["workload.num_requests=5"])
    assert sc.workload.num_requests == 5


def test_quick_block_errors(tiny_raw):
    tiny_raw["quick"] = [1, 2]
    with pytest.raises(ScenarioError, match=r"^quick: got \[1, 2\], must be a mapping"):
        scenario_from_dict(tiny_raw, quick=True)
    tiny_raw["quick"] = {"workload": {"num_requests": 0}}
    with pytest.raises(ScenarioError, match=r"^workload.num_requests: got 0"):
        scenario_from_dict(tiny_raw, quick=True)


def test_deep_merge_does_not_mutate():
    base = {"a": {"b": 1, "c": [1]}, "d": 1}
    extra = {"a": {"b": 2}, "d": {"e": 1}}
    assert deep_merge(base, extra) == {"a": {"b": 2, "c": [1]}, "d": {"e": 1}}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 1}


# -- variants and grids -----------------------------------------------------------------


def test_variants_expand_in_order_with_labels(tiny_raw):
    tiny_raw["variants"] = [
        {"label": "static", "set": {"scheduler": {"name": "static", "max_batch": 2}}},
        {"label": "deep", "set": {"scheduler.max_num_seqs": 8}},
        {"label": "base"},
    ]
    sc = scenario_from_dict(tiny_raw)
    runs = sc.expand()
    assert [r.label for r in runs] == ["static", "deep", "base"]
    assert runs[0].scheduler.name == "static"
    assert runs[1].scheduler.max_num_seqs == 8
    assert runs[2].scheduler == sc.scheduler
    assert all(r.variants == [] and r.grid is None for r in runs)


def test_no_variants_expand_to_self(tiny_scenario):
    assert tiny_scenario.expand() == [tiny_scenario]
    assert tiny_scenario.label == "base"


def test_bad_value_inside_variant_names_the_variant(tiny_raw):
    tiny_raw["variants"] = [
        {"label": "ok", "set": {"scheduler.max_num_seqs": 2}},
        {"label": "broken", "set": {"scheduler.max_num_seqs": 0}},
    ]
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tiny_raw)
    assert str(info.value).startswith("variants['broken'].scheduler.continuous.max_num_seqs: got 0")


def test_duplicate_variant_labels(tiny_raw):
    tiny_raw["variants"] = [{"label": "a"}, {"label": "a"}]
    with pytest.raises(ScenarioError, match=r"^variants\[1\].label: got 'a', must be unique$"):
        scenario_from_dict(tiny_raw)


def test_bad_variant_set_path(tiny_raw):
    tiny_raw["variants"] = [{"label": "a", "set": {"seed.x": 1}}]
    with pytest.raises(ScenarioError, match=r"^variants\[0\].set: seed.x: 'seed' is 7"):
        scenario_from_dict(tiny_raw)


def test_grid_expansion_with_prefix_and_also_set(tiny_raw):
    tiny_raw["grid"] = {
        "path": "scheduler.max_num_seqs",
        "values": [2, 8],
        "label_prefix": "d",
        "also_set": ["scheduler.max_num_batched_tokens"],
    }
    runs = scenario_from_dict(tiny_raw).expand()
    assert [r.label for r in runs] == ["d2", "d8"]
    assert [r.scheduler.max_num_seqs for r in runs] == [2, 8]
    assert [r.scheduler.max_num_batched_tokens for r in runs] == [2, 8]


def test_grid_bad_value_reported_with_its_label(tiny_raw):
    tiny_raw["grid"] = {"path": "scheduler.max_num_seqs", "values": [4, -1], "label_prefix": "d"}
    expected = r"^variants\['d-1'\].scheduler.continuous.max_num_seqs"
    with pytest.raises(ScenarioError, match=expected):
        scenario_from_dict(tiny_raw)


def test_grid_duplicate_values_give_duplicate_labels(tiny_raw):
    tiny_raw["grid"] = {"path": "seed", "values": [1, 1]}
    with pytest.raises(ScenarioError, match="must be unique"):
        scenario_from_dict(tiny_raw)


def test_resolved_has_defaults_and_no_expansion_fields(tiny_raw):
    tiny_raw["quick"] = {"seed": 1}
    tiny_raw["grid"] = {"path": "seed", "values": [1, 2]}
    sc = scenario_from_dict(tiny_raw)
    resolved = sc.expand()[1].resolved()
    assert resolved["seed"] == 2
    assert resolved["label"] == "2"
    assert resolved["simulation"]["fuse_iterations"] is True
    assert resolved["kv_cache"] == {
        "block_size": 8,
        "num_blocks": 64,
        "mem_fraction": None,
        "activation_reserve_gib": None,
        "reserved_blocks": 0,
    }
    for key in ("quick", "variants", "grid"):
        assert key not in resolved


def test_scenario_is_frozen(tiny_scenario):
    with pytest.raises(ValueError, match="frozen"):
        tiny_scenario.seed = 3


# -- files ------------------------------------------------------------------------------


def test_load_scenario_file(tmp_path, tiny_raw):
    path = tmp_path / "my_question.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in tiny_raw.items() if k != "name"}))
    sc = load_scenario(path, overrides=["seed=5"])
    assert isinstance(sc, Scenario)
    assert sc.name == "my_question"  # the file's stem when the file names none
    assert sc.seed == 5
    assert sc.base_dir == tmp_path.resolve()


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: 1\nworkload: {num_requests: 3\nkv_cache: x\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: line ")
    assert "not valid YAML" in msg
    assert "\n" not in msg


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match=r"nope.yaml: cannot read scenario"):
        load_scenario(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just a string\n", ""])
def test_yaml_that_is_not_a_mapping(tmp_path, text):
    path = tmp_path / "list.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=r"^<root>: got \w+, must be a mapping of fields$"):
        load_scenario(path)


def test_lab_scenarios_validate():
    root = Path(__file__).resolve().parents[2] / "scenarios"
    files = sorted(root.glob("*.yaml"))
    assert files
    for path in files:
        for quick in (False, True):
            sc = load_scenario(path, quick=quick)
            assert sc.name == path.stem
            assert len(sc.expand()) >= 2


# Refuse at the edge (issue 13): every number finite and in range, no booleans as numbers.


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"scheduler.max_num_seqs": True},
            "scheduler.continuous.max_num_seqs: got True, must be a number, not true/false",
        ),
        (
            {"kv_cache.num_blocks": False},
            "kv_cache.num_blocks: got False, must be a number, not true/false",
        ),
        (
            {"cost.padding": [1, True]},
            "cost.linear.padding[1]: got [1, True], must be a number, not true/false",
        ),
        (
            {"workload.arrival.rate_per_s": float("inf")},
            "workload.arrival.poisson.rate_per_s: got inf, must be a finite number",
        ),
        (
            {"workload.arrival.rate_per_s": "inf"},
            "workload.arrival.poisson.rate_per_s: got 'inf', must be a finite number",
        ),
        ({"slo.ttft_ms": float("nan")}, "slo.ttft_ms: got nan, must be a finite number"),
        (
            {"workload.num_requests": float("inf")},
            "workload.num_requests: got inf, must be a finite number",
        ),
        ({"seed": -1}, "seed: got -1, must be greater than or equal to 0"),
    ],
)
def test_non_finite_negative_seed_and_boolean_numbers_refused(error_of, changes, expected):
    assert error_of(changes) == expected


def test_an_unquoted_off_for_a_field_of_words_is_named_with_the_words_and_the_quote(
    tiny_raw, tmp_path
):
    # YAML 1.1 (PyYAML) reads an unquoted off/on/yes/no as false/true: a field that takes
    # words says which, and how to write one, not "must be a number"
    fit = Path(__file__).resolve().parents[1] / "data" / "synthetic_fit.yaml"
    tiny_raw["cost"] = {"name": "profile", "path": str(fit)}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tiny_raw, overrides=["cost.prompt_save=off"])
    assert str(info.value) == (
        "cost.profile.prompt_save: got False, must be 'fitted' or 'off' (YAML reads an "
        'unquoted off, on, yes or no as true/false: quote it, "off")'
    )
    assert scenario_from_dict(tiny_raw, overrides=["cost.prompt_save='off'"]).cost.prompt_save == (
        "off"
    )
    grid = tmp_path / "grid.yaml"
    grid.write_text("speed_reference: off\n")
    with pytest.raises(TraceError) as info:
        load_grid(grid)
    assert str(info.value) == (
        f"{grid}: speed_reference: got False, must be 'off', 'record' or 'scale' (YAML reads "
        'an unquoted off, on, yes or no as true/false: quote it, "off")'
    )


def test_booleans_still_accepted_where_the_field_is_a_boolean(make_scenario):
    sc = make_scenario({"simulation.fuse_iterations": False})
    assert sc.simulation.fuse_iterations is False


def test_override_overflowing_to_inf_refused(tiny_raw):
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tiny_raw, overrides=["workload.arrival.rate_per_s=1e400"])
    msg = str(info.value)
    assert msg == "workload.arrival.poisson.rate_per_s: got inf, must be a finite number"


def test_every_config_model_refuses_non_finite_numbers():
    """The rule holds for every model of the schema, not only the ones tested above:
    each derives from the one closed, finite base."""
    from pydantic import BaseModel

    from lyra_simpy.config import Closed

    def models(tp: Any, seen: set[type]) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in seen:
                return
            seen.add(tp)
            for f in tp.model_fields.values():
                models(f.annotation, seen)
        for arg in getattr(tp, "__args__", ()) or ():
            models(arg, seen)

    found: set[type] = set()
    models(Scenario, found)
    assert len(found) > 20
    open_models = sorted(m.__name__ for m in found if not issubclass(m, Closed))
    assert open_models == []
    assert all(m.model_config.get("allow_inf_nan") is False for m in found)


def test_typo_inside_quick_caught_without_quick(tiny_raw):
    tiny_raw["quick"] = {"workload": {"num_requsts": 3}}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tiny_raw)
    assert str(info.value).startswith("quick: workload.num_requsts: unknown field")


def test_bad_variant_under_quick_caught_without_quick(tiny_raw):
    tiny_raw["variants"] = [{"label": "a", "set": {}}]
    tiny_raw["quick"] = {"variants": [{"label": "a", "set": {"scheduler.max_num_seqs": 0}}]}
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(tiny_raw)
    assert str(info.value).startswith(
        "quick: variants['a'].scheduler.continuous.max_num_seqs: got 0"
    )


def test_each_variant_validated_once(tiny_raw, monkeypatch):
    from lyra_simpy import scenario as scenario_module

    tiny_raw["variants"] = [{"label": str(n), "set": {"seed": n}} for n in range(3)]
    calls = []
    real = scenario_module._validate

    def counting(raw, base_dir, prefix=""):
        calls.append(raw.get("label", "base"))
        return real(raw, base_dir, prefix)

    monkeypatch.setattr(scenario_module, "_validate", counting)
    sc = scenario_from_dict(tiny_raw)
    assert [v.seed for v in sc.expand()] == [0, 1, 2]
    sc.expand()
    assert sorted(calls) == ["0", "1", "2", "base"]
