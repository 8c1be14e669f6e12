"""The llama.cpp matrix's document (validation/llamacpp_report.py) is written from the
numbers: the summary's three tables, each load's row with its cells and the evidence of
its real steps, the fits and the spells line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from builders import validation_module

REPORT = validation_module("llamacpp_report")
TABLES = validation_module("llamacpp_tables")
POINTS = validation_module("llamacpp_points")


def _table(error: float, spread: float) -> list[dict[str, Any]]:
    row = {"sim": 1.0, "real": 1.0, "error": error, "spread": spread, "runs": [1.0]}
    return [{"metric": m, **row} for m in POINTS.METRICS]


def test_the_document_is_written_from_the_numbers(tmp_path: Path, monkeypatch: Any) -> None:
    m = REPORT
    monkeypatch.setattr(m, "PUBLISHED", tmp_path / "m.json")
    doc = tmp_path / "doc.md"
    doc.write_text(f"reading before\n{POINTS.START}\nold tables\n{POINTS.END}\nreading after\n")
    machine = [{"before": "1.0 1.0 1.0", "after": "1.5 1.0 1.0", "step_before": 28.4,
                "step_after": None}]  # fmt: skip
    ratios = {"decode_p50": 1.04, "decode_mean": 1.06, "decode_steps": 400,
              "prompt_p50": 1.13, "prompt_steps": 40}  # fmt: skip
    loads = {"closed_8": {"table": _table(0.113, 0.14), "machine": machine,
                          "steps_vs_fit": ratios}}  # fmt: skip
    coef = {"fixed_ms": 20.0, "per_decode_seq_ms": 8.0, "per_extra_pass_ms": 0.0}
    res = {
        "flags": ["-np", "4", "-kvu"], "loads": loads, "capacity_req_s": 3.1,
        "table2": {"closed_8": _table(0.0, 0.1)}, "table2_steps": {"closed_8": None},
        "table3": {"closed_8": _table(0.2, 0.1)},
        "fits": {"probes": coef, "runs": {**coef, "per_extra_pass_ms": 11.0}, "joint": coef},
        "runs_spells": {"share": 0.056, "factor": 1.82, "steps": 1.3, "decode_steps": 3000},
        "runs_spells_simulated": False,
        "idle": [["0-0.1 s", 72, 0.0], ["0.1-0.3 s", 0, None], ["0.3-1 s", 36, 19.3]],
    }  # fmt: skip
    facts = {"cpu": "x", "cores": 2, "repeats": 3, "wall_min": 9}
    m.write_section(doc, facts, {"kvu/long": res})
    text = doc.read_text()
    assert text.startswith("reading before\n")
    assert text.endswith("reading after\n")
    assert "old tables" not in text
    # the summary: Table 1 misses throughput (11.3 % > 5 %), Table 2 has all 7, Table 3 none
    # and last the real decode steps over Table 1's fit, lowest-highest over the loads
    assert "| `-np 4 -kvu` | long | 6 / 7 | 11 % | 7 / 7 | 0 % | 0 / 7 | 20 % | 1.04–1.04 |" in text
    # each table's row: its cells, then the evidence of its real steps by its fit
    assert "| closed_8 | +11.3 % (±14 %) ✗ | +11.3 % (±14 %) |" in text
    assert "| 1.04 · 1.06, 1.13 | 1.0→1.5 (28·— ms) |" in text
    assert "| closed_8 | +0.0 % (±10 %) | +0.0 % (±10 %) |" in text  # Table 2
    assert "| — | 1.0→1.5 (28·— ms) |" in text  # (no ratios stored for it)
    assert "Table 3 — calibrated on the probes and the real runs of poisson_0.6 together" in text
    assert "Fit on runs: fixed_ms 20, per_decode_seq_ms 8, per_extra_pass_ms 11." in text
    assert "Fit on both: fixed_ms 20, per_decode_seq_ms 8." in text
    assert "Slow spells in those runs (not simulated; `--spells` does): 6% of" in text
    assert (
        "the engine's prompt time less the probe's (`validation/llamacpp_idle.py`): 0-0.1 s "
        "72 at +0.0 ms; 0.1-0.3 s 0; 0.3-1 s 36 at +19.3 ms." in text
    )
    assert json.loads((tmp_path / "m.json").read_text())["results"]["kvu/long"] == res


def test_the_summary_lists_points_in_the_matrix_order_whatever_order_they_ran() -> None:
    # points run again with --only are stored after the others; the summary (the README's
    # table) keeps the matrix's order, and gives each point's range of real decode steps
    # over its probe fit, or a dash for a point stored without them
    m = REPORT

    def res(flags: list[str], ratios: list[float] | None) -> dict[str, Any]:
        loads = {f"load{i}": {"table": _table(0.0, 0.1), "machine": [],
                              **({"steps_vs_fit": {"decode_p50": r}} if ratios else {})}
                 for i, r in enumerate(ratios or [1.0, 1.0])}  # fmt: skip
        return {"flags": flags, "loads": loads, "table2": {}}

    results = {"np2_b64/long": res(["-np", "2"], [1.23, 0.96, 1.1]),
               "default/short": res(["-np", "4"], None),
               "default/long": res(["-np", "4"], [0.9, 1.0])}  # fmt: skip
    rows = m.summary(results)[2:]
    assert [r.split(" | ")[1] for r in rows] == ["short", "long", "long"]
    assert rows[0].endswith("| — |")
    assert rows[1].endswith("| 0.90–1.00 |")
    assert rows[2].startswith("| `-np 2` |")
    assert rows[2].endswith("| 0.96–1.23 |")
    assert [k for k, _ in m.in_order({"odd/x": 1, "kvu/short": 2, "default/long": 3})] == [
        "default/long",
        "kvu/short",
        "odd/x",
    ]


def test_stored_profiles_get_the_counts_of_this_version(tmp_path: Path) -> None:
    # a stored -kvu profile written before attention_computed, its attention_cells
    # counted by an older rule: the columns it lacks are added, the attention counts
    # recounted by the profiler's rules (llamacpp_probes.row_counts), the step columns
    # checked against them
    flags = ["-np", "4", "-c", "4096", "-t", "2", "-kvu"]
    (tmp_path / "grid.yaml").write_text("sliding_window: true\n")
    head = "phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints"
    rows = ["prefill,1,300,0,500.0,2,2,1,99", "decode,2,0,200,30.0,1,1,0,0",
            "prefill,4,290,0,1700.0,2,4,4,5"]  # fmt: skip
    (tmp_path / "profile.csv").write_text("\n".join([head + ",attention_cells", *rows]) + "\n")
    assert TABLES.with_probe_columns(tmp_path, flags) == [
        "attention_cells",
        "attention_computed",
        "output_passes",
    ]
    lines = (tmp_path / "profile.csv").read_text().splitlines()
    assert lines[0] == head + ",output_passes,attention_cells,attention_computed"
    # 296 then 4 tokens (a checkpoint stop): 296 x 512 + 4 x 512 cells spanned; 15 tiles
    # of 64 x 64, then 297 + ... + 300 pairs computed
    assert lines[1].endswith(",1,153600,62634")
    assert lines[2].endswith(",1,0,0")
    assert lines[3].endswith(",1,960512,262664")  # four prompts of 290 sent together
    assert TABLES.with_probe_columns(tmp_path, flags) == []  # nothing left to change
    # a step column the rules disagree with is a stored profile of another layout
    (tmp_path / "profile.csv").write_text(head + "\nprefill,1,300,0,500.0,2,3,1\n")
    with pytest.raises(AssertionError):
        TABLES.with_probe_columns(tmp_path, flags)


def test_stored_profiles_of_prompt_steps_are_recounted_step_by_step(tmp_path: Path) -> None:
    # grid.mixed_timing: steps — each row one step of its prompt (prompt_tokens,
    # prompt_step): counted as that step, not as a prompt of its input_tokens
    from lyra_simpy.live.llamacpp_probes import llamacpp_config, row_counts
    from lyra_simpy.live.profile_grid import ProfileGrid

    flags = ["-np", "4", "-c", "4096", "-t", "2"]
    (tmp_path / "grid.yaml").write_text("sliding_window: true\n")
    llama = llamacpp_config(" ".join(flags), ProfileGrid(sliding_window=True))
    assert llama is not None
    first, last = (row_counts(llama, "mixed", 3, 64, 20, step=j) for j in (0, 1))
    assert first[2] == 0  # no checkpoint in the prompt's first chunk's step
    assert last[2] == 1
    assert last[3] == first[3] + 1  # logits: the decoders' pass, and the prompt's last
    head = ("phase,batch_size,input_tokens,context_len,latency_ms,steps,passes,checkpoints,"
            "output_passes,prompt_tokens,prompt_step")  # fmt: skip
    rows = [
        f"mixed,3,60,20,80.0,1,{first[1]},0,{first[3]},64,0",
        f"mixed,3,4,20,50.0,1,{last[1]},1,{last[3]},64,1",
        "decode,2,0,20,30.0,1,1,0,1,,",
    ]
    (tmp_path / "profile.csv").write_text("\n".join([head, *rows]) + "\n")
    assert TABLES.with_probe_columns(tmp_path, flags) == ["attention_cells", "attention_computed"]
    lines = (tmp_path / "profile.csv").read_text().splitlines()
    assert lines[1].endswith(f",64,0,{first[4]},{first[5]}")
    assert lines[2].endswith(f",64,1,{last[4]},{last[5]}")
    assert first[4] > 0
    assert last[4] > 0


def _charge(median: float, p10: float, p90: float, prompt: float | None) -> dict[str, Any]:
    stat = {"steps": 100, "median": median, "mean": median, "p10": p10, "p90": p90}
    none = {"steps": 0, "median": None, "mean": None, "p10": None, "p90": None}
    prompt_stat = none if prompt is None else {**stat, "median": prompt}
    return {"decode": stat, "prompt": prompt_stat, "decode_by_batch": {}, "left_out": 0}


def test_steps_priced_as_the_table_charges_replace_the_fit_terms_where_every_load_has_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # since item 23 each load stores compare --steps against the table's own scenario;
    # the summary's last column and each table's column read it, a set stored before
    # (no charge on some load) keeps the fit-term ratios and says so in its head
    m = REPORT
    monkeypatch.setattr(m, "PUBLISHED", tmp_path / "m.json")
    fit = {"decode_p50": 0.5, "decode_mean": 0.5, "prompt_p50": 0.5}

    def res(charges: list[dict[str, Any] | None]) -> dict[str, Any]:
        loads = {f"load{i}": {"table": _table(0.0, 0.1), "machine": [], "steps_vs_fit": fit,
                              "steps_vs_charge": c} for i, c in enumerate(charges)}  # fmt: skip
        return {"flags": ["-np", "4"], "loads": loads, "table2": {"load0": _table(0.0, 0.1)},
                "table2_charge": {"load0": _charge(0.97, 0.9, 1.1, None)},
                "fits": {"probes": {}, "runs": {}}, "capacity_req_s": 1.0}  # fmt: skip

    both = {"default/short": res([_charge(1.08, 0.95, 1.26, 1.12), _charge(0.98, 0.8, 1.2, None)])}
    rows = m.summary(both)
    assert rows[0].endswith("| real decode steps ÷ Table 1's charge |")
    assert rows[2].endswith("| 0.98–1.08 |")
    doc = tmp_path / "doc.md"
    doc.write_text(f"{POINTS.START}\n{POINTS.END}\n")
    m.write_section(doc, {"cores": 2, "repeats": 3}, both)
    text = doc.read_text()
    assert text.count(m.STEPS_HEAD[True]) == 2  # Tables 1 and 2
    assert "| 1.08 (0.95–1.26), 1.12 | " in text  # a prompt median where prompts were priced
    assert "| 0.98 (0.80–1.20) | " in text
    assert "| 0.97 (0.90–1.10) | " in text  # Table 2's, by its own scenario
    half = {"default/short": res([_charge(1.08, 0.95, 1.26, 1.12), None])}
    assert m.summary(half)[0].endswith("| real decode steps ÷ Table 1's fit |")
    assert m.summary(half)[2].endswith("| 0.50–0.50 |")
    # Table 1's cells by how far each load's steps ran from the charge; loads without it
    # are left out
    assert m.cells_by_steps(both) == {"within 3 %": [7, 7, 1], "beyond 6 %": [7, 7, 1]}
    assert m.cells_by_steps(half) == {"beyond 6 %": [7, 7, 1]}
