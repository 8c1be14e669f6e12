"""The vLLM CPU matrix's document (``docs/VALIDATION-vllm.md``): the summary, each point's
table with its target cells marked, the counters beside vLLM's own, the decode steps'
account of TPOT, the fit, and the reading of the tables (:data:`READING`, kept by hand)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from speed_gate import FLOOR_PROBES, GATE, GATE_WAIT_S, profile_step
from vllm_points import (
    CONFIGS,
    DOC,
    FIT_LOAD,
    FIT_POINT,
    MAX_NUM_SEQS,
    PROFILE,
    PUBLISHED,
    SHOWN,
    TARGET,
)
from vllm_steps import SLOW

from lyra_simpy.live import vllm_cpu


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def cell(row: dict[str, Any]) -> tuple[str, bool | None]:
    """One metric's cell and whether it meets the target (None: shown, no target):
    throughput within 5 %; p50s within 10 % or the real runs' spread, whichever is
    wider."""
    err, spread, name = row["error"], row["spread"], row["metric"]
    ok: bool | None = None
    if name == "output_throughput":
        ok = abs(err) <= 0.05
    elif name in TARGET:
        ok = abs(err) <= max(0.10, spread)
    mark = "" if ok is None or ok else " ✗"
    return f"{_pct(err)} (±{100 * spread:.0f} %){mark}", ok


def counter_cells(entry: dict[str, Any]) -> tuple[str, str, list[bool]]:
    """The prefix-cache hit rate and the preemption count, real (the engine's
    ``/metrics`` over each run) against simulated, and whether each meets its target:
    hit rate within 2 points (over the runs' summed tokens), preemptions within 10 % of
    the real runs' median (0 only for 0); with the cache off (no queries counted) the
    simulation must hit nothing."""
    runs = entry["counters"]
    queries = sum(c.get("prefix_cache_queries", 0.0) for c in runs)
    hits = sum(c.get("prefix_cache_hits", 0.0) for c in runs)
    sim_rate = entry["sim"]["prefix_cache_hit_rate"] or 0.0
    oks = []
    if queries > 0:
        real_rate = hits / queries
        ok = abs(sim_rate - real_rate) <= 0.02
        oks.append(ok)
        hit = f"{100 * sim_rate:.1f} % vs {100 * real_rate:.1f} %{'' if ok else ' ✗'}"
    else:  # prefix caching off: vLLM counts no queries, so nothing can hit
        ok = sim_rate == 0.0
        oks.append(ok)
        hit = f"{100 * sim_rate:.1f} % vs none queried{'' if ok else ' ✗'}"
    pre = [c.get("preemptions", 0.0) for c in runs]
    sim_pre = float(entry["sim"]["preemptions"])
    if pre:
        med = float(np.median(pre))
        ok = abs(sim_pre - med) <= 0.10 * med if med else sim_pre == 0
        oks.append(ok)
        each = ", ".join(f"{p:.0f}" for p in pre)
        preempt = f"{sim_pre:.0f} vs {med:.0f} ({each}){'' if ok else ' ✗'}"
    else:
        preempt = "n/a"
    return hit, preempt, oks


def _tally(tables: list[list[dict[str, Any]]]) -> str:
    """Cells in target over *tables* and the median |error| of their p50s."""
    ok = total = 0
    p50: list[float] = []
    for table in tables:
        for row in table:
            if row["metric"] in TARGET:
                ok += bool(cell(row)[1])
                total += 1
                if row["metric"].startswith("median"):
                    p50.append(abs(row["error"]))
    return f"{ok} / {total} | {100 * float(np.median(p50)):.0f} %" if total else "— | —"


def summary(results: dict[str, Any]) -> list[str]:
    """One row per point: for each table the cells in target (latency and throughput)
    and the median |error| of the p50s; the counters in target (the README's fidelity
    rows)."""
    rows = ["| configuration | workload | loads | Table 1 (probes): cells in target | "
            "median p50 error | Table 1, decode rows by the probes' mean step | median p50 "
            "error | Table 2 (one load run): cells in target | median p50 error | "
            "Table 3 (probes and one load run): cells in target | median p50 error | "
            "counters in target |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for key, res in results.items():
        cfg, workload = key.split("/")
        entries = list(res["loads"].values())
        oks = [ok for entry in entries for ok in counter_cells(entry)[2]]
        flags = " ".join(CONFIGS[cfg]) or "(vLLM's CPU defaults)"
        one = _tally([e["table"] for e in entries])
        gap = _tally([e["table1_mean"] for e in entries if "table1_mean" in e])
        two = _tally([e["table2"] for e in entries if "table2" in e])
        three = _tally([e["table3"] for e in entries if "table3" in e])
        rows.append(f"| `{flags}` | {workload} | {len(entries)} | {one} | {gap} | {two} | "
                    f"{three} | {sum(oks)} / {len(oks)} |")  # fmt: skip
    return rows


def tpot_from_steps(entry: dict[str, Any]) -> float | None:
    """The TPOT error a simulator right in every other way would show at this load if
    its decode steps ran at the probe fit while the real ones ran at their mean ratio to
    it (``steps_vs_fit``): 1 / mean - 1."""
    got = entry.get("steps_vs_fit")
    return None if not got else 1.0 / got["mean"] - 1.0


def tpot_account(results: dict[str, Any]) -> list[str]:
    """One paragraph: how much of Table 1's TPOT error the real decode steps' mean
    accounts for, load by load (the arrow in each row's steps column)."""
    pairs, off = [], []
    for key, res in results.items():
        for load, entry in res["loads"].items():
            expected = tpot_from_steps(entry)
            if expected is not None:
                by = {r["metric"]: r for r in entry["table"]}
                pairs.append((by["median_tpot_ms"]["error"], expected))
                if abs(pairs[-1][0] - expected) > 0.10:
                    off.append(f"{key} {load} ({100 * pairs[-1][0]:+.0f} against "
                               f"{100 * expected:+.0f} %)")  # fmt: skip
    if not pairs:
        return []
    close = len(pairs) - len(off)
    return [
        "How much of Table 1's TPOT error the real runs' decode steps account for: a "
        "simulator right in every other way, its decode steps at the probe fit while the "
        "real ones ran at their mean ratio to it (the steps column), would show a TPOT "
        "error of 1/mean - 1 (the arrow there). The table's error is within 10 points of "
        f"it at {close} of {len(pairs)} loads" + (f"; not at {', '.join(off)}." if off else "."),
        "",
    ]


def write_doc(facts: dict[str, Any], results: dict[str, Any], fit: dict[str, Any],
              fit_runs: dict[str, Any] | None = None) -> None:  # fmt: skip
    """``docs/VALIDATION-vllm.md`` from the numbers (and their copy beside it)."""
    fit_runs = fit_runs or {}
    PUBLISHED.parent.mkdir(parents=True, exist_ok=True)
    numbers = {"facts": facts, "fit": fit, "fit_runs": fit_runs, "results": results}
    PUBLISHED.write_text(json.dumps(numbers, indent=1, default=str) + "\n")
    smoke = facts.get("quick") or facts.get("repeats", 0) < 3
    lines = [
        "# Validation against vLLM V1 on this CPU",
        "",
        "Written by `tox -e validate-vllm-cpu` (validation/validate_vllm_cpu.py) from "
        "`docs/validation/vllm-matrix.json`; never by hand. The reading of the tables is in "
        "[the section after them](#what-the-tables-show).",
        "",
    ]
    if smoke:
        lines += [
            "> **A smoke run, not the validation** (quick mode or fewer than 3 real "
            "runs per point): it shows the loop runs end to end, not the error.",
            "",
        ]
    lines += [
        f"- engine: `{facts.get('package')}` with a random-weight Llama {vllm_cpu.TINY} "
        "(timing does not depend on the weights), served on 127.0.0.1",
        f"- machine: {facts.get('cpu')} ({facts.get('cores')} cores); load average "
        f"(1/5/15 min) {facts.get('load_start')} at the start, {facts.get('load_end')} at "
        f"the end; wall time {facts.get('wall_min')} min",
        f"- {facts.get('repeats')} real runs per load, the prefix cache emptied before each "
        "(`POST /reset_prefix_cache`), so each starts as cold as the simulation",
        f"- every launch: `{fit.get('launch', '')}` with the configuration's flags; the "
        "scenarios take that line as `engine.command` (the vLLM preset reads it)",
        f"- host speed: the profile was taken once a lone request's decode step came within "
        f"{100 * GATE:.0f} % of "
        + (
            f"the speed the real runs started at (the median of their before-probes, "
            f"{_ms(fit.get('floor_ms'))} ms; `--reprofile` {fit['reprofiled']})"
            if fit.get("reprofiled")
            else f"the quickest of {FLOOR_PROBES} probes ({_ms(fit.get('floor_ms'))} ms)"
        )
        + f"; the profile's batch-1 step {_ms(fit.get('profile_step_ms'))} ms, "
        f"{fit.get('profile_tries', '?')} profile(s); each real run waited (at most "
        f"{GATE_WAIT_S:.0f} s) for a probe within {100 * GATE:.0f} % of the step the profile "
        "it was run against had read",
        "- request path: "
        + (
            f"`workload.request_path_ms: {fit['request_path_ms']}` in every Table 1 scenario, "
            "from the profile (its lone prompts' client TTFT less vLLM's own prefill time, "
            "`/metrics` `vllm:request_prefill_time_seconds`; the prompt rows are timed by that "
            "metric too); Table 2's scenarios have none (the runs alone)"
            if fit.get("request_path_ms")
            else "none (0: the profile timed prompts by the client's TTFT)"
        ),
        "",
        "## Summary",
        "",
        *summary(results),
        "",
        "Targets (issue 21): throughput within 5 %; p50 TTFT, TPOT and E2E within 10 % or "
        "the real runs' spread, whichever is wider; prefix-cache hit rate within 2 points; "
        "preemptions within 10 %. Each cell: the simulator's error against the median real "
        "run (± the real runs' spread, (max - min) / median); ✗ = outside the target; p90s "
        "are shown without a target. Table 1: the cost model fitted to the probes of "
        "`lyra-simpy profile` alone; Table 2: fitted by `calibrate --from-runs` on the real "
        f"runs of {FIT_LOAD} of {FIT_POINT} alone (the same real runs are then predicted "
        "again, that one load included), with the slow spells it found in them "
        + (
            "({share:.0%} of the decode steps at {factor:.2f}x, {steps:.1f} steps a spell; "
            "`cost.jitter.spells: fitted`).".format(**fit_runs["spells"])
            if fit_runs.get("spells")
            else "(none found)."
        )
        + " Table 3: the probes and those runs in one fit (`calibrate PROFILE --from-runs "
        "... --scenario`), no spells simulated.",
        "",
        *tpot_account(results),
        "## Fits",
        "",
        "| coefficient (ms) | probes (`calibrate --loss soft_l1`) | one load run "
        "(`calibrate --from-runs --loss soft_l1`) | both (`calibrate PROFILE --from-runs`) |",
        "|---|---:|---:|---:|",
    ]
    runs_coef = fit_runs.get("coefficients", {})
    joint_coef = fit_runs.get("joint_coefficients", {})
    for name, value in fit.get("coefficients", {}).items():
        other = [c.get(name) for c in (runs_coef, joint_coef)]
        lines.append(
            f"| `{name}` | {value:.4g} | "
            + " | ".join("—" if o is None else f"{o:.4g}" for o in other)
            + " |"
        )
    lines.append("")
    probe = _ms(profile_step(PROFILE))
    head = "| load | " + " | ".join(SHOWN) + " | real decode steps / Table 1's fit: p50 · " \
           f"mean · ≥{SLOW:g}x → the TPOT error the mean gives | hit rate sim vs real | "\
           "preemptions sim vs " \
           "real (each run) | batch-1 step per run, ms: before · in the run · after " \
           f"(profile {probe}) | load avg before→after |"  # fmt: skip
    sep = "|" + "---|" * (len(SHOWN) + 6)
    for key, res in results.items():
        cfg, workload = key.split("/")
        flags = " ".join(CONFIGS[cfg]) or "defaults"
        lines += ["", f"### `{flags}`, {workload}", "",
                  f"Capacity (simulated closed loop of {MAX_NUM_SEQS}): "
                  f"{res['capacity_req_s']:.2f} req/s; finished {res.get('finished')}.", "",
                  head, sep]  # fmt: skip
        for load, entry in res["loads"].items():
            hit, preempt, _ = counter_cells(entry)
            machine = "; ".join(f"{m['before'].split()[0]}→{m['after'].split()[0]}"
                                for m in entry["machine"])  # fmt: skip
            solo = "; ".join(
                " · ".join(_ms(x) for x in (m.get("step_before"), s, m.get("step_after")))
                for m, s in zip(entry["machine"], entry.get("solo_step_ms", []), strict=False)
            )
            got, expected = entry.get("steps_vs_fit"), tpot_from_steps(entry)
            steps = "—" if not got or expected is None else (
                f"{got['p50']:.2f} · {got['mean']:.2f} · {100 * got['slow']:.0f} % → "
                f"TPOT {100 * expected:+.0f} %")  # fmt: skip
            for name, table in (("", entry["table"]), (" (Table 2)", entry.get("table2")),
                                (" (Table 3)", entry.get("table3"))):  # fmt: skip
                if table is None:
                    continue
                by = {r["metric"]: r for r in table}
                cells = [cell(by[m])[0] for m in SHOWN]
                mine = steps if not name else "—"
                lines.append(f"| {load}{name} | " + " | ".join(cells) + f" | {mine} | {hit} | "
                             f"{preempt} | {solo} | {machine} |")  # fmt: skip
    lines += ["", "## What the tables show", "", READING, ""]
    DOC.write_text("\n".join(lines))


READING = """\
Written for the numbers above: the whole gated matrix as `tox -e validate-vllm-cpu` ran
it from a fresh clone on 2026-12-02 (07:19-08:13 UTC). Items 1-4 and 7 are what earlier
runs taught (dated there); 5, 6, 8 and 9 read the tables above.

**1. This VM changes speed by up to 2x from minute to minute.** With nothing else
running, `python validation/host_noise.py 60` (a fixed one-thread piece of work every
0.5 s) gave median 78 ms, range 54-158 ms, p90/p10 1.83. `python validation/vllm_drift.py`
read batch-1 steps of 35-39 ms on a server profiled at 20.6 ms; with every unpinned
thread and the client moved off the worker's core (`--confine`) the slow spells stayed:
they come from the host. The first, ungated run (commit a2ba5e0) had 5 of 24 cells in
target on the short workload. Since then each real run waits until a lone request's
decode step is within 15 % of the profile's (at most 90 s; the tables show each run's
step before, inside and after it), and the profile is taken once a lone step comes
within 15 % of the quickest of six speed probes. The profile's repeats are rounds over
the whole grid, so a slow spell moves one measurement of a row, not all three.

**2. A second profile was served from vLLM's prefix cache** when `lyra-simpy profile`
drew its prompt ids from a fixed seed (prefill of 1024 tokens 92 ms against 339-650 ms).
The probes draw fresh ids every run, and every profile and real run starts from an
emptied cache.

**3. The KV pool has one block fewer than vLLM logs.** V1 keeps one block as its null
block (`BlockPool.__init__`): with `--num-gpu-blocks-override 24` its `/metrics` KV
usage moves in steps of 1/23. With 23 blocks (`kv_cache.reserved_blocks`, set by the
vllm preset) the preemptions were 12 simulated against 11, 12 and 11 real (14 with 24;
in this run 12 against 12, 12 and 15): every counter of the matrix is in target (28 of
28).

**4. A client's TTFT holds a request path the engine does not.** The profile used to
price prompts by the client's TTFT. vLLM's own prefill time (`/metrics`
`vllm:request_prefill_time_seconds`, read around each probe) is 7-12 ms less at every
prompt size (`request_path_ms_by_prompt` in the profile's metadata): HTTP, the API
server, the hand-off to the engine process, the stream. The prompt rows are now the
engine's time, and the 8.4 ms median is the scenarios' `workload.request_path_ms`
(TTFT and E2E count it, the engine does not). A per-prompt cost term tried on the way
(`per_prefill_seq_ms`) had been measuring this path; it was taken out again.

**5. Under a load, the real decode steps spread around the probes' fit, in stretches.**
`python validation/vllm_steps.py` rebuilds the decode-only steps of every stored real
run (as `calibrate --from-runs` does) and prices them by the probe fit: at the median
0.81-1.37x the fit, the mean 0.88-1.45x; 3-47 % of them take 1.5x the fit or more, and
31-87 % of those come right after another slow one: stretches, the host's slow spells
(1) and a core shared under traffic (below), not one request's event. This run's profile
read a lone decode step at 25 ms, the host's quickest probe that minute 22 ms: the
simulator is slow where the real steps ran near the host's quick state (median
0.81-0.88x: TPOT up to 19 % high) and fast where they ran slow (1.24-1.37x: TPOT up to
28 % low). The column "real decode steps / Table 1's fit" shows the three numbers on
each load's row, and the TPOT error the mean alone gives (1/mean - 1): the paragraph
under the summary counts the loads where Table 1's TPOT error is within 10 points of it.
At the run before this one (commit 05eca89), the three loads outside carried long prompts
(800-1200 tokens among short ones; 512-token system prompts computed anew without the
prefix cache), whose mixed steps the decode-only ratio leaves out.

Within a run a request alone mostly decodes at about the profile's speed (the tables'
"in the run" steps, mostly 19-28 ms, some runs 33-50 ms: the host); traffic loads the
shared core. vLLM pins its
worker to core 0 and leaves the API server, the engine core's busy loop and the client
to share core 1; a replay opens a connection per request and the API server handles
each arrival and every streamed token there. `python validation/vllm_contention.py
--rounds 6` measured a 4-way decode step at 34.7 ms alone, 53.7 ms while another client
only kept asking `GET /v1/models` (work for the API server and none for the engine) and
50.4 ms while it sent one-token completions (in a slow spell of the host; its rounds
alone read 25-43 ms). Earlier calls: 23.6 / 36.5 / 30.0 ms and 30.8 / 47.0 / 37.2 ms;
one 4-round call in a noisier minute showed no difference (38.5 / 41.1 / 47.2 ms,
rounds alone 24-54 ms). The cost is this 2-core VM's (a GPU server gives its API
server cores of its own).

**6. Median or mean step for the decode rows.** A decode row was the median chunk gap
of its probe, which drops the slow steps of 5 as they happen in the probe, and a TPOT
counts them. `lyra-simpy profile` now also writes each probe's mean step over the window
in which all its requests decode (`lyra_simpy.live.client.lockstep_step_ms`; columns
`median_gap_ms` and `mean_step_ms`, `ProfileGrid.decode_step` picks the latency). On
this run's profile the means run -6 to +15 % from the medians, and Table 1 puts 43 of
64 cells in target with them against 42 with the medians (the summary's third column;
at the run before, 24 against 20; `--resimulate` recomputes both). On the llama.cpp
matrix the same swap gives 30, 26 and 12 of 35 against 29, 24 and 20
(docs/VALIDATION-llamacpp.md): a probe of a few seconds catches as many slow steps as it
happens to, more than its runs had there. The
median stays the default (robust, as issue 12 asks); the slow steps are modelled apart,
from runs (8).

**7. One profile is one sample of the host.** Two `--reprofile` calls five minutes
apart (2026-12-02 03:30 and 03:35 UTC, both passing the gate of 1 on a lone step)
read 8-way decode steps (mean steps) of 38-46 ms and 26-34 ms, and put 46 and 24 of 64
cells in target with their mean steps; the tables are from the second, by its medians
(the profile before them, 2026-12-01 22:58 UTC: 30). This run's profile, its lone step
at 25 ms, puts 42 of 64 in target against the same real-run protocol. The runs, over 36 minutes,
average over the host's slow spells; a profile of three rounds in two minutes catches
them or not. That, not a scheduler detail, sets Table 1 on this VM. The simulator can
now run a host's slow spells (`cost.jitter.spells`), but only a fit on runs measures
them (8): probes alone cannot. Profiling under the workload's own request traffic, or a
client and a host of their own, is the next step.

**8. Table 2** (`calibrate --from-runs` on the three runs of default/short at 0.6) fits
steps that already carry the contention of 5, and simulates the slow spells it finds in
them (`cost.jitter.spells: fitted`, calibration.md §8; the summary's note gives them):
37 of 64 in this run, 13 of 24 on the short workload it was fitted on. It prices contexts
its runs never had by extrapolation: its median p50 errors run 13-35 % (at the run
before, 39-164 % on 512-token system prompts, 24 blocks and a 256-token budget, its fit
slow there). `--resimulate --no-spells` gives it without the spells. The rebuild places a
long prompt's chunks where the engine ran them (`--scenario`: the scenario's token
budget; calibration.md §7); the fitted runs' prompts fit in one step.

**9. Table 3** fits the probes and the same runs together (`calibrate PROFILE
--from-runs ... --scenario`): the probes give the costs the short workload's runs never
exercised (512-token system prompts, long prompts, a full pool), the runs the steps of a
loaded server. In this run 39 of 64, against 42 (probes) and 37 (runs alone); at the run
before, 34 against 20 and 25, the best of the three. With a profile that happened to read
the host near its loaded speed the runs add little; with one read in a quick minute they
add the most.

**What holds.** The prefix-cache hit rate is within 1.2 points of vLLM's counter
wherever prompts share full 128-token blocks (88.3 % vs 88.3 %, 87.1 % vs 88.3 %), zero
on both sides otherwise; preemptions within 10 %; throughput within 2.7 % at every
Poisson load. The scheduler's semantics (token budget, chunked
prefill, block-hash prefix caching, recompute preemption, the null block) agree with
vLLM's counters; the latencies miss the target by the slow steps of 5 and the
profile-to-profile spread of 7, which each table shows."""
"""The reading of the tables, written once the matrix has run (kept in the script so
that ``--doc-only`` keeps it)."""
