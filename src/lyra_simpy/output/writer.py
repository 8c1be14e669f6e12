"""Run a scenario file end to end: every variant, its files, its table, its figures.

Layout of ``OUT/<scenario>/``: one folder per variant with ``requests.jsonl``,
``summary.json``, ``timeseries.npz`` (the per-iteration series, one column per field;
``lyra_simpy.read_series(folder)`` reads it; ``timeseries.csv`` beside it with
``--timeseries-csv``), ``itl.csv`` (inter-token latencies as
``itl_ms,count`` pairs), ``transfers.csv`` (disaggregated clusters: each request's KV
hand-off), ``replicas.csv`` (with processes: every change of a replica's state,
``time_s,replica,state,serving``; ``state`` codes into
:data:`~lyra_simpy.cluster.lifecycle.STATES`), ``manifest.json`` and, with
``output.trace_events`` or ``--trace-events``,
``trace_events.json`` (:mod:`lyra_simpy.output.trace_events`), plus ``table.csv`` (the
printed table). The whole folder is written atomically (see
:func:`~lyra_simpy.metrics.io.atomic_dir`).
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lyra_simpy.dotted import get_path
from lyra_simpy.engine.request import RECORD_FIELDS
from lyra_simpy.metrics.io import (
    atomic_dir,
    write_itl_csv,
    write_json,
    write_records_jsonl,
    write_series_csv,
    write_series_npz,
)
from lyra_simpy.metrics.summary import refusals_line
from lyra_simpy.output.provenance import ask_git_revision, manifest
from lyra_simpy.output.tables import format_table, format_value
from lyra_simpy.scenario import Scenario
from lyra_simpy.simulation import Results, simulate
from lyra_simpy.whatif import format_scorecard, scorecard, write_scorecard

#: Columns added to every table whenever a run has such requests (and the table does not
#: show them already): a reader can always tell served from refused and cut off.
ACCOUNTING_COLUMNS = {"rejected": "rejected", "failed": "failed", "unfinished": "unfinished"}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def table_rows(scenario: Scenario, results: list[Results]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of the scenario's report table."""
    columns = dict(scenario.report.columns)
    for header, key in ACCOUNTING_COLUMNS.items():
        shown = key in columns.values()
        if not shown and any(res.summary.get(key) for res in results):
            columns[header if header not in columns else key + "_requests"] = key
    headers = list(columns)
    rows = []
    for res in results:
        resolved = res.scenario.resolved()
        row = []
        for key in columns.values():
            if key == "label":
                row.append(res.scenario.label)
            elif key in res.summary:
                row.append(res.summary[key])
            else:
                row.append(get_path(resolved, key))
        rows.append(row)
    return headers, rows


def best_variant(scenario: Scenario, results: list[Results]) -> Results | None:
    metric = scenario.report.best
    if metric is None:
        return None

    def score(res: Results) -> float:
        value = res.summary.get(metric)
        return float("-inf") if value is None else float(value)

    return max(results, key=score)


def write_variant(
    res: Results,
    folder: Path,
    source_file: str | None,
    index: int = 0,
    timeseries_csv: bool = False,
    trace: bool = False,
) -> None:
    """Write one run's files (DESIGN §4) into *folder* (*timeseries_csv*: the series as
    CSV too, beside the ``.npz``; *trace* or the scenario's ``output.trace_events``: its
    Perfetto trace)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_records_jsonl(folder / "requests.jsonl", res.records, RECORD_FIELDS)
    write_json(folder / "summary.json", res.summary)
    write_series_npz(folder / "timeseries.npz", res.timeseries)
    if timeseries_csv:
        write_series_csv(folder / "timeseries.csv", res.timeseries)
    write_itl_csv(folder / "itl.csv", *res.itl_s)
    if res.transfers:
        write_series_csv(folder / "transfers.csv", res.transfers)
    if res.replicas:
        write_series_csv(folder / "replicas.csv", res.replicas)
    info = manifest(res.scenario, res.engine, source_file)
    info["variant_index"] = index
    write_json(folder / "manifest.json", info)
    if trace or res.scenario.output.trace_events:
        from lyra_simpy.output.trace_events import write_trace_events

        write_trace_events(res, folder / "trace_events.json")


def _simulate_timed(job: tuple[Scenario, bool]) -> Results:
    """One variant, with its request log when a timeline is wanted, and its wall time
    (module level: a worker process runs it)."""
    variant, timeline = job
    t0 = time.perf_counter()
    res = simulate(variant, request_log=timeline)
    res.engine["wall_s"] = round(time.perf_counter() - t0, 3)
    return res


def run_scenario(
    scenario: Scenario,
    out_root: Path | None = Path("results"),
    figures_dir: Path | None = Path("figures"),
    source_file: str | None = None,
    echo: Callable[[str], None] = print,
    warn: Callable[[str], None] | None = None,
    timeseries_csv: bool = False,
    trace_events: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> list[Results]:
    """Simulate every variant of *scenario*; write results and figures unless the
    folders are None; print the report table through *echo*, and through *warn*
    (default: stderr) one line per variant that refused or cut off requests
    (*timeseries_csv*: each variant's series as CSV too; *trace_events*: each variant's
    Perfetto trace; *progress*: bars on stderr, see :mod:`lyra_simpy.output.progress`;
    *workers* > 1: the variants run on a local process pool of that many, the same
    numbers and files as one after another, only the progress bar is per variant)."""
    from lyra_simpy.output.progress import RunProgress

    if warn is None:
        warn = _stderr
    variants = scenario.expand()
    jobs = [(v, trace_events or v.output.trace_events) for v in variants]
    results: list[Results] = []
    with RunProgress(scenario.name, len(variants), progress) as bars:
        if workers > 1 and len(variants) > 1:
            from lyra_simpy.sweep.executors import open_executor

            done: dict[int, Results] = {}
            with open_executor(min(workers, len(variants))) as pool:
                for i, res in pool.run(_simulate_timed, jobs):
                    done[i] = res
                    bars.done()
            results = [done[i] for i in range(len(variants))]
        else:
            if out_root is not None:  # (not before a process pool forks: no thread then)
                ask_git_revision()
            for variant, timeline in jobs:
                t0 = time.perf_counter()
                watch = bars.watch(variant.label, variant.simulation.until_s)
                res = simulate(variant, watch, request_log=timeline)
                res.engine["wall_s"] = round(time.perf_counter() - t0, 3)
                results.append(res)
                bars.done()
    for variant, res in zip(variants, results, strict=True):
        line = refusals_line(f"{scenario.name}/{variant.label}", res.summary)
        if line is not None:
            warn(line)
    headers, rows = table_rows(scenario, results)
    echo(f"== {scenario.name}" + (f": {scenario.description}" if scenario.description else ""))
    echo(format_table(headers, rows))
    best = best_variant(scenario, results)
    metric = scenario.report.best
    if best is not None and metric is not None:
        echo(f"best {metric}: {best.scenario.label} ({format_value(best.summary[metric])})")
    card = None
    if scenario.whatif is not None:
        card = scorecard(scenario.whatif, [r.summary for r in results])
        echo(f"speedup over {scenario.whatif.reference} ({scenario.whatif.metric}):")
        echo(format_scorecard(card))
    if out_root is not None:
        final = out_root / scenario.name
        with atomic_dir(final) as tmp:
            if card is not None:
                write_scorecard(card, tmp)
            for i, res in enumerate(results):
                write_variant(
                    res, tmp / res.scenario.label, source_file, i, timeseries_csv, trace_events
                )
            with (tmp / "table.csv").open("w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(headers)
                writer.writerows(rows)
        echo(f"results: {final}/")
        if figures_dir is not None and scenario.figures:
            from lyra_simpy.output.figures import draw_scenario_figures

            for path in draw_scenario_figures(scenario, final, figures_dir):
                echo(f"figure: {path}")
    return results
