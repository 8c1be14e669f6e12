"""What the explorer shows, read from result folders: no Streamlit here (unit-tested).

A results folder holds ``<scenario>/<variant>/`` folders written by ``lyra-simpy run``
(``summary.json``, ``requests.jsonl``, ``itl.csv``, ``timeseries.npz``,
``manifest.json``). :func:`provenance` turns a manifest into the lines the app shows
beside every number: what ran, which cost model, where it was calibrated and which
validation error applies (so a roofline estimate is never read as a measurement).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from lyra_simpy.metrics.io import read_itl_csv, read_jsonl, read_series

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
"""The per-request (and pooled ITL) latencies whose CDFs the app draws."""
SUMMARY_ROWS = (
    "completed", "rejected", "request_throughput", "output_throughput", "request_goodput",
    "goodput_token_throughput", "slo_attainment", "median_ttft_ms", "p99_ttft_ms",
    "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms",
    "p99_e2el_ms", "duration",
)  # fmt: skip
"""Summary metrics in the app's table (vLLM names), in order."""
SERIES = ("batch_seqs", "prefill_tokens", "decode_seqs", "kv_blocks", "waiting")
"""Per-iteration columns drawn in the timeline."""


@dataclass
class Run:
    """One result folder (a simulated variant, a rerun in the app, or a real replay)."""

    label: str
    summary: dict[str, Any]
    manifest: dict[str, Any]
    latencies: dict[str, npt.NDArray[np.float64]]
    """Per completed request: ``ttft_ms``, ``tpot_ms``, ``e2el_ms``."""
    itl_ms: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]
    """Pooled inter-token latencies as (value, count)."""
    series: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    folder: Path | None = None


def scenarios(results_dir: Path) -> list[str]:
    """Scenario folders under *results_dir* that hold at least one variant."""
    if not results_dir.is_dir():
        return []
    return sorted(p.name for p in results_dir.iterdir() if p.is_dir() and variants(p))


def variants(scenario_dir: Path) -> list[str]:
    """Variant folders of *scenario_dir*, in the order they ran."""
    found = []
    for p in scenario_dir.iterdir():
        if p.is_dir() and (p / "summary.json").is_file():
            info = _json(p / "manifest.json")
            found.append((int(info.get("variant_index", 0)), p.name))
    return [name for _, name in sorted(found)]


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_run(folder: Path, label: str | None = None) -> Run:
    """Read one result folder (missing optional files give empty parts)."""
    rows = read_jsonl(folder / "requests.jsonl") if (folder / "requests.jsonl").is_file() else []
    ok = [r for r in rows if r.get("status") == "ok"]
    lat = {
        name: np.array([r[name] for r in ok if r.get(name) is not None], dtype=np.float64)
        for name in ("ttft_ms", "tpot_ms", "e2el_ms")
    }
    itl_path = folder / "itl.csv"
    if itl_path.is_file() and itl_path.stat().st_size > len("itl_ms,count\n"):
        itl = read_itl_csv(itl_path)
    else:
        itl = (np.zeros(0), np.zeros(0, dtype=np.int64))
    has_series = (folder / "timeseries.npz").is_file() or (folder / "timeseries.csv").is_file()
    return Run(
        label=label or folder.name,
        summary=_json(folder / "summary.json"),
        manifest=_json(folder / "manifest.json"),
        latencies=lat,
        itl_ms=itl,
        series=read_series(folder) if has_series else {},
        folder=folder,
    )


def from_results(res: Any, label: str) -> Run:
    """A :class:`Run` from an in-memory :class:`~lyra_simpy.simulation.Results`."""
    from lyra_simpy.output.provenance import manifest

    rec = res.records
    ok = rec["status"] == "ok"
    lat = {name: rec[name][ok & ~np.isnan(rec[name])] for name in ("ttft_ms", "tpot_ms", "e2el_ms")}
    values, counts = res.itl_s
    return Run(label, dict(res.summary), manifest(res.scenario, res.engine, None), lat,
               (values * 1000.0, counts), dict(res.timeseries))  # fmt: skip


def cdf(run: Run, metric: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(sorted values, cumulative fraction) of *metric* in *run* (ITL weighted by count)."""
    if metric == "itl_ms":
        values, weights = run.itl_ms
        order = np.argsort(values, kind="stable")
        x, w = values[order], weights[order].astype(np.float64)
        total = w.sum()
        return x, (np.cumsum(w) / total if total else w)
    x = np.sort(run.latencies.get(metric, np.zeros(0)))
    return x, np.arange(1, len(x) + 1, dtype=np.float64) / max(len(x), 1)


def thin(x: npt.NDArray[Any], y: npt.NDArray[Any], points: int = 400) -> tuple[Any, Any]:
    """At most about *points* of a CDF (evenly spaced in rank, the last one kept)."""
    if len(x) <= points:
        return x, y
    idx = np.unique(np.r_[np.linspace(0, len(x) - 1, points).astype(np.int64), len(x) - 1])
    return x[idx], y[idx]


def summary_table(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per summary metric, one column per run."""
    return [
        {"metric": name, **{run.label: run.summary.get(name) for run in runs}}
        for name in SUMMARY_ROWS
        if any(name in run.summary for run in runs)
    ]


def timeline(run: Run, replica: int | None = None, points: int = 4000) -> dict[str, Any]:
    """The per-iteration series of *run* (one *replica*, or all), reduced to about
    *points* rows by taking each bin's maximum (peaks stay visible)."""
    s = run.series
    if not s or not len(s.get("start_s", ())):
        return {}
    keep = np.ones(len(s["start_s"]), dtype=bool)
    if replica is not None and "replica" in s:
        keep = s["replica"] == replica
    cols = {name: np.asarray(s[name])[keep] for name in ("start_s", *SERIES) if name in s}
    n = len(cols["start_s"])
    if n > points:
        edges = np.linspace(0, n, points + 1).astype(np.int64)[:-1]
        cols = {
            name: (col[edges] if name == "start_s" else np.maximum.reduceat(col, edges))
            for name, col in cols.items()
        }
    return {name: col.tolist() for name, col in cols.items()}


# -- provenance -------------------------------------------------------------------------
def provenance(info: dict[str, Any], repo: Path | None = None) -> dict[str, Any]:
    """What produced a run and what its numbers are worth: ``source`` (version, git
    revision, date, seed, scenario file), ``cost`` (model and calibration), ``kind``
    (``measured-fit``, ``catalog estimate``, ``given coefficients`` or ``real run``) and
    ``validation`` (the validation error that applies, as text)."""
    cost = info.get("cost_model") or {}
    name = cost.get("name")
    calibration = cost.get("calibration")
    source = {k: info.get(k) for k in ("version", "git_revision", "date", "seed",
                                        "scenario_file", "platform")}  # fmt: skip
    if not info or "scenario" not in info:
        return {"source": source, "cost": name, "kind": "real run" if info else "unknown",
                "calibration": None, "validation": _real_note(info)}  # fmt: skip
    if name == "profile" and isinstance(calibration, dict):
        kind = "fitted to a measured profile"
        fit = calibration.get("fit_quality") or {}
        meta = calibration.get("profile_metadata") or {}
        where = ", ".join(str(meta[k]) for k in ("hardware", "model", "engine") if meta.get(k))
        text = f"fit {calibration.get('fit_file')} ({where}); R² {fit.get('r2')}"
        validation = _validation_text(repo) or (
            "no end-to-end validation recorded for this profile: the fit's R² and per-phase "
            "errors are the only check"
        )
    elif name == "roofline":
        kind = "roofline estimate from catalogs (not a measurement)"
        text = str(calibration)
        validation = _roofline_text(repo) or (
            "roofline step times are estimates; see docs/calibration-roofline.md"
        )
    else:
        kind = "coefficients given in the scenario (not calibrated on hardware)"
        text = str(calibration or "coefficients given in the scenario YAML")
        validation = (
            "none applies: a model with given coefficients shows what the policies do under "
            "that cost, not what a real engine would measure"
        )
    return {"source": source, "cost": name, "kind": kind, "calibration": text,
            "validation": validation}  # fmt: skip


def _real_note(info: dict[str, Any]) -> str:
    engine = info.get("engine") if info else None
    return f"a measured run ({engine})" if engine else "a measured run"


def _validation_text(repo: Path | None) -> str | None:
    """The summary table of docs/VALIDATION.md (llama.cpp on CPU), as one line."""
    path = (repo or Path.cwd()) / "docs" / "VALIDATION.md"
    if not path.is_file():
        return None
    errors = [float(v) for v in re.findall(r"\| ([+-][0-9.]+) %", path.read_text())]
    if not errors:
        return None
    return (
        f"end to end against llama.cpp on CPU (docs/VALIDATION.md): errors from "
        f"{min(errors):+.1f} % to {max(errors):+.1f} % over {len(errors)} cells"
    )


def _roofline_text(repo: Path | None) -> str | None:
    """The headline of docs/calibration-roofline.md: median error per source."""
    path = (repo or Path.cwd()) / "docs" / "calibration-roofline.md"
    if not path.is_file():
        return None
    rows = re.findall(r"^\| ([a-z-]+) \| (\d+) \| ([0-9.]+%) \| ([+-][0-9.]+%) \|$",
                      path.read_text(), flags=re.M)  # fmt: skip
    if not rows:
        return None
    parts = ", ".join(f"{src} median {med} (worst {worst})" for src, _, med, worst in rows)
    return f"step times vs published measurements (docs/calibration-roofline.md): {parts}"


# -- rerun --------------------------------------------------------------------------------
KNOBS = ("rate_per_s", "max_num_seqs", "scheduler", "max_num_batched_tokens", "num_blocks",
         "ttft_ms", "tpot_ms")  # fmt: skip
"""What the app lets a user change before a quick rerun."""


SEATS = {"static": "max_batch", "prefill_first": "max_running_requests"}
"""Each scheduler's name for the running-sequence cap (``max_num_seqs`` otherwise)."""
BUDGETS = {
    "continuous": "max_num_batched_tokens",
    "chunked_prefill": "max_num_batched_tokens",
    "prefill_first": "chunked_prefill_size",
}
"""Each scheduler's token budget per iteration (static has none)."""


def seats_and_budget(scheduler: dict[str, Any]) -> tuple[int | None, int | None]:
    """The running-sequence cap and token budget of a resolved scheduler block."""
    name = scheduler.get("name", "")
    budget = BUDGETS.get(name)
    return scheduler.get(SEATS.get(name, "max_num_seqs")), (
        scheduler.get(budget) if budget else None
    )


def rerun_raw(info: dict[str, Any], knobs: dict[str, Any], base: Path) -> dict[str, Any]:
    """The scenario of a manifest, in quick mode (the file's ``quick:`` block when the
    file is found), with *knobs* applied; ``None`` knobs are left as they were."""
    from lyra_simpy.dotted import deep_merge

    raw: dict[str, Any] = json.loads(json.dumps(info["scenario"]))
    raw.pop("engine", None)  # its flags are already resolved into the knobs below
    file = info.get("scenario_file")
    if file:
        path = Path(file) if Path(file).is_absolute() else base / file
        if path.is_file():
            quick = (yaml.safe_load(path.read_text()) or {}).get("quick") or {}
            raw = deep_merge(raw, {k: v for k, v in quick.items()
                                   if k not in ("variants", "grid", "whatif")})  # fmt: skip
    sched = dict(raw.get("scheduler") or {})
    old = SEATS.get(sched.get("name", ""), "max_num_seqs"), BUDGETS.get(sched.get("name", ""))
    if knobs.get("scheduler") and knobs["scheduler"] != sched.get("name"):
        new = knobs["scheduler"]
        carried = {SEATS.get(new, "max_num_seqs"): sched.get(old[0])}
        if BUDGETS.get(new) and old[1]:
            carried[BUDGETS[new]] = sched.get(old[1])
        sched = {"name": new, **{k: v for k, v in carried.items() if v is not None}}
    name = sched.get("name", "")
    if knobs.get("max_num_seqs") is not None:
        sched[SEATS.get(name, "max_num_seqs")] = knobs["max_num_seqs"]
    if knobs.get("max_num_batched_tokens") is not None and BUDGETS.get(name):
        sched[BUDGETS[name]] = knobs["max_num_batched_tokens"]
    raw["scheduler"] = sched
    if knobs.get("rate_per_s") is not None:
        raw["workload"]["arrival"]["rate_per_s"] = knobs["rate_per_s"]
    if knobs.get("num_blocks") is not None:
        raw["kv_cache"]["num_blocks"] = knobs["num_blocks"]
    for key in ("ttft_ms", "tpot_ms"):
        if key in knobs:
            raw.setdefault("slo", {})[key] = knobs[key]
    raw["label"] = f"{raw.get('label', 'base')} (rerun)"
    return raw
