"""The llama.cpp matrix's document: the summary table (the README's fidelity table),
Table 1's cells by how far the host's speed ran from the charge, and every point's
three tables with the evidence of its real steps, written into
``docs/VALIDATION-llamacpp.md`` between markers (the reading around them is written by
hand and kept)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_gate
from llamacpp_points import (
    CONFIGS,
    END,
    FIT_LOAD,
    METRICS,
    PUBLISHED,
    REGIMES,
    START,
    cell,
    in_target,
    p50_errors,
)


def _steps(got: dict[str, Any] | None, charge: dict[str, Any] | None = None) -> str:
    """The real runs' steps measured / what the table charges (*charge*,
    :func:`charge_ratios`: decode median (p10–p90), prompt median) or, for a matrix
    stored before item 23, measured / priced by the table's fit terms (*got*,
    :func:`llamacpp_steps.load_ratios`: decode p50 · mean, prompt p50): where a row's
    latency misses come from."""
    if charge and charge["decode"]["steps"]:
        d, pr = charge["decode"], charge["prompt"]
        text = f"{d['median']:.2f} ({d['p10']:.2f}–{d['p90']:.2f})"
        return text + (f", {pr['median']:.2f}" if pr["steps"] else "")
    if not got:
        return "—"
    return f"{got['decode_p50']:.2f} · {got['decode_mean']:.2f}, {got['prompt_p50']:.2f}"


STEPS_HEAD = {
    True: "real steps / what the table charges (`compare --steps`): decode median "
    "(p10–p90), prompt median",
    False: "real steps / the table's fit: decode p50 · mean, with a prompt p50",
}
"""The per-table column's head, by whether the table's loads carry :func:`charge_ratios`."""


def charged(results: dict[str, Any]) -> bool:
    """Every load of every point carries Table 1's :func:`charge_ratios` (a matrix stored
    since item 23, or given them by ``--steps-check``)."""
    return all(v.get("steps_vs_charge") for res in results.values() for v in res["loads"].values())


def _machine(x: dict[str, Any]) -> str:
    """One real run's load average before→after and, for gated runs, the batch-1 step
    the speed probe read before·after it (ms)."""
    text = f"{x['before'].split()[0]}→{x['after'].split()[0]}"
    if "step_before" in x:
        ms = [f"{v:.0f}" if v is not None else "—" for v in (x["step_before"], x["step_after"])]
        text += f" ({'·'.join(ms)} ms)"
    return text


def in_order(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """The stored points in the matrix's order (:data:`CONFIGS` × :data:`REGIMES`), not the
    order they were run in; a point of neither comes last."""
    order = [f"{c}/{r}" for c in CONFIGS for r in REGIMES]
    return sorted(
        results.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)
    )


STEP_BANDS = (0.03, 0.06)
"""How far a load's real decode steps ran from Table 1's charge (|median ratio − 1|) for
:func:`cells_by_steps`: within 3 %, 3–6 %, beyond 6 % (the speed gate's 5 % between)."""


def cells_by_steps(results: dict[str, Any]) -> dict[str, list[int]]:
    """Table 1's cells in target, its cells and its loads, over every load of *results*
    that carries :func:`charge_ratios`, by how far its real decode steps ran from the
    charge (:data:`STEP_BANDS`; empty for a matrix stored without them): do the misses
    follow the host's speed?"""
    lo, hi = STEP_BANDS
    names = (f"within {100 * lo:.0f} %", f"{100 * lo:.0f}–{100 * hi:.0f} %",
             f"beyond {100 * hi:.0f} %")  # fmt: skip
    out: dict[str, list[int]] = {}
    for res in results.values():
        for v in res["loads"].values():
            if not v.get("steps_vs_charge"):
                continue
            off = abs(v["steps_vs_charge"]["decode"]["median"] - 1)
            band = out.setdefault(names[0 if off <= lo else 1 if off <= hi else 2], [0, 0, 0])
            band[0] += sum(in_target(v["table"]).values())
            band[1] += len(METRICS)
            band[2] += 1
    return {k: out[k] for k in names if k in out}


def summary(results: dict[str, Any]) -> list[str]:
    """One row per configuration and length regime: for each table, the cells inside the
    target (of loads × :data:`METRICS`) and the median |error| of the p50s and of
    throughput (the README's fidelity table); last, the real runs' median decode-only step
    over what Table 1 charges for it (:func:`charge_ratios`; a matrix stored before item
    23: over Table 1's fit terms), lowest and highest over the loads: a miss with the
    steps themselves off is in the cost, or the host, not the scheduling."""
    by_charge = charged(results)
    rows = ["| server flags | requests | Table 1 (probes): cells in target | median p50 "
            "error | Table 2 (one load run): cells in target | median p50 error | Table 3 "
            "(probes and one load run): cells in target | median p50 error | real decode "
            f"steps ÷ Table 1's {'charge' if by_charge else 'fit'} |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, res in in_order(results):
        cells = [f"`{' '.join(res['flags'])}`", key.split("/")[1]]
        for tables in ({k: v["table"] for k, v in res["loads"].items()}, res["table2"],
                       res.get("table3", {})):  # fmt: skip
            if not tables:
                cells += ["—", "—"]
                continue
            ok = sum(sum(in_target(table).values()) for table in tables.values())
            p50 = [e for table in tables.values() for e in p50_errors(table)]
            cells += [f"{ok} / {len(METRICS) * len(tables)}",
                      f"{100 * float(np.median(p50)):.0f} %"]  # fmt: skip
        ratios = [v["steps_vs_charge"]["decode"]["median"] if by_charge
                  else v["steps_vs_fit"]["decode_p50"] for v in res["loads"].values()
                  if v.get("steps_vs_fit") or by_charge]  # fmt: skip
        cells.append(f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def write_section(doc: Path, facts: dict[str, Any], results: dict[str, Any],
                  commands: list[str] | None = None) -> None:  # fmt: skip
    """Put the matrix tables into *doc* between :data:`START` and :data:`END`, and the
    numbers into :data:`PUBLISHED`, with the *commands* that made them (the log
    ``matrix.json`` keeps) when given."""
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    published = {"facts": facts, "results": results}
    if commands is not None:
        published["commands"] = commands
    PUBLISHED.write_text(json.dumps(published, indent=1))
    lines = [START, "", "## The tables", ""]
    lines += [*summary(results), ""]
    lines.append(
        f"Machine: {facts.get('cpu')} ({facts.get('cores')} cores), shared"
        + (
            " (at the whole run; a point run again names its own where known, below); "
            if any(r.get("hardware") for r in results.values())
            else "; "
        )
        + (
            f"load average (1/5/15 min) {facts['load_start']} at the start, "
            f"{facts.get('load_end')} at the end; "
            if facts.get("load_start")
            else ""
        )
        + f"{facts.get('repeats')} real runs per point"
        + (f"; wall time {facts['wall_min']} min" if facts.get("wall_min") else "")
        + f"{'; **quick mode**' if facts.get('quick') else ''}"
        + (f". {facts['note']}" if facts.get("note") else "")
        + ". Each cell: simulator error "
        "against the median real run (the real runs' own ± spread); ✗ = outside the target "
        "(throughput 5 %; p50 10 % or the spread, whichever is wider; p90 the spread)."
        + (
            f" Simulated again from the stored profiles and real runs on {facts['resimulated']}"
            " (`validate_cpu.py --matrix --resimulate`: the simulator and the fits of that "
            "day, the real runs of the date above)."
            if facts.get("resimulated")
            else ""
        )
        + (
            (" Run again afterwards" if facts.get("resimulated") else " Each point's run")
            + ", profile and real runs included (`--only`), finished: "
            + ", ".join(
                f"{k} ({results[k].get('finished', '?')}"
                + (f", on {results[k]['hardware']}" if results[k].get("hardware") else "")
                + ")"
                for k in facts["rerun"]
                if k in results
            )
            + "."
            if facts.get("rerun")
            else ""
        )
    )
    sep = "|" + "---|" * (len(METRICS) + 3)
    for key, res in in_order(results):
        cfg, reg = key.split("/")
        flags = " ".join(res["flags"])
        for title, tables, ratios, charges in (
            ("Table 1 — calibrated from probes alone", {
                k: v["table"] for k, v in res["loads"].items()},
             {k: v.get("steps_vs_fit") for k, v in res["loads"].items()},
             {k: v.get("steps_vs_charge") for k, v in res["loads"].items()}),
            (f"Table 2 — calibrated on the real runs of {FIT_LOAD}", res["table2"],
             res.get("table2_steps", {}), res.get("table2_charge", {})),
            (f"Table 3 — calibrated on the probes and the real runs of {FIT_LOAD} together",
             res.get("table3", {}), res.get("table3_steps", {}), res.get("table3_charge", {})),
        ):  # fmt: skip
            if not tables:
                continue
            by_charge = all(charges.get(load) for load in tables)
            head = (f"| load | {' | '.join(METRICS)} | {STEPS_HEAD[by_charge]} | load avg "
                    "before→after (step) |")  # fmt: skip
            lines += ["", f"### `{flags}`, {reg} requests: {title}", "", head, sep]
            for load, table in tables.items():
                by = {r["metric"]: r for r in table}
                cells = [cell(by[m])[0] for m in METRICS]
                m = res["loads"][load]["machine"]
                machine = "; ".join(_machine(x) for x in m)
                steps = _steps(ratios.get(load), charges.get(load) if by_charge else None)
                lines.append(f"| {load} | " + " | ".join(cells) + f" | {steps} | {machine} |")
        lines.append("")
        fits = {k: ", ".join(f"{t} {v:.3g}" for t, v in c.items() if v > 1e-9)
                for k, c in res["fits"].items()}  # fmt: skip
        cap = res["capacity_req_s"]
        gate = res.get("gate")
        gated = "" if not gate else (
            f" Profiled at the host's quickest (`validation/speed_gate.py`): the speed probe's "
            f"floor {gate['floor_ms']} ms, {gate.get('probe_after_profile_ms')} ms right after "
            f"the profile ({gate['profile_tries']} profile(s); its own batch-1 rows, at longer "
            f"contexts, {gate['profile_step_ms']} ms); each real run waited for a probe within "
            f"{100 * gate.get('tolerance', speed_gate.GATE):.0f} % of "
            + (f"the profile's typical speed reference, {gate['run_ref_ms']} ms"
               if "speed_reference" in gate else "the floor")
            + " (at most "
            f"{speed_gate.GATE_WAIT_S:.0f} s)."
        )  # fmt: skip
        if gate and gate.get("batch_check"):
            checks = "; ".join(f"{c['profile_ms']} against {c['check_ms']} ms"
                               for c in gate["batch_check"])  # fmt: skip
            gated += (
                f" Its row for the full batch against that step measured right after "
                f"(`full_batch_step`, {len(gate['batch_check'])} profile(s)): {checks}."
            )
        sp = res.get("runs_spells")
        how = ("Table 2 simulates them: `--spells`" if res.get("runs_spells_simulated")
               else "not simulated; `--spells` does")  # fmt: skip
        spells = (f" Slow spells in those runs ({how}): {sp['share']:.0%} of "
                  f"the decode steps at {sp['factor']:.2f}x, {sp['steps']:.1f} steps a spell."
                  if sp else "")  # fmt: skip
        idle = res.get("idle")
        idled = "" if not idle else (
            " Lone prompts, by the server's idle time before them: the engine's prompt time "
            "less the probe's (`validation/llamacpp_idle.py`): " + "; ".join(
                f"{name} {n}{'' if ex is None else f' at {ex:+.1f} ms'}" for name, n, ex in idle
            ) + "."
        )  # fmt: skip
        wake = res.get("wake")
        woke = "" if not wake else (
            f" The profile's wake probe (Table 1 charges it, `cost.wake: fitted`): "
            f"{wake['ms']:.1f} ms on the first step after {wake['after_s']:g} s idle "
            f"({wake['prompts']} lone prompts, {wake['back_to_back_ms']:.1f} ms back to back)."
        )  # fmt: skip
        save = res.get("prompt_save")
        woke += "" if not save else (
            " The profile's prompt-cache probe (Table 1 charges it, `cost.prompt_save: "
            f"fitted`): {save['ms_per_token']:.4f} ms a token saved ({save['prompts']} lone "
            "prompts)."
        )  # fmt: skip
        lines.append(f"Capacity (simulated, {cfg}): {cap:.3f} req/s. Fit from probes: "
                     f"{fits['probes']}. Fit on runs: {fits['runs']}."
                     + (f" Fit on both: {fits['joint']}." if "joint" in fits else "")
                     + f"{spells}{gated}{idled}{woke}")  # fmt: skip
    lines += ["", END]
    text = doc.read_text() if doc.is_file() else ""
    if START in text and END in text:
        text = text[: text.index(START)] + "\n".join(lines) + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    doc.write_text(text)
