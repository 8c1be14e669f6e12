"""The explorer page (``app.py`` is the script Streamlit runs; it calls :func:`main`).

Reads ``$LYRA_EXPLORE_RESULTS`` (default ``results``) and ``$LYRA_EXPLORE_FIGURES``
(default ``figures``). Everything it computes comes from :mod:`lyra_simpy.explore.data`;
this module only lays out widgets and charts.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from lyra_simpy.explore import data


def _where(name: str, default: str) -> Path:
    """A folder named by ``$LYRA_EXPLORE_<NAME>`` (read on every run of the page)."""
    return Path(os.environ.get(f"LYRA_EXPLORE_{name}", default))


LABELS = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "itl_ms": "ITL (ms)",
          "e2el_ms": "E2E latency (ms)"}  # fmt: skip


def _load_folder(folder: str, label: str, stamp: float) -> data.Run:
    """*stamp* (the summary's mtime) is only part of the cache key: a rerun re-reads."""
    return data.load_run(Path(folder), label)


_load = st.cache_data(show_spinner=False)(_load_folder)


def _run(folder: Path, label: str) -> data.Run:
    summary = folder / "summary.json"
    run: data.Run = _load(str(folder), label, summary.stat().st_mtime if summary.is_file() else 0.0)
    return run


def _provenance(runs: list[data.Run]) -> None:
    st.subheader("Provenance")
    for run in runs:
        p = data.provenance(run.manifest, _where("REPO", "."))
        src = p["source"]
        line = (
            f"**{run.label}** — cost model `{p['cost']}`: {p['kind']}. "
            f"lyra-simpy {src.get('version')} @ `{str(src.get('git_revision'))[:12]}`, "
            f"seed {src.get('seed')}, {src.get('scenario_file') or 'in the app'}, "
            f"{src.get('date')}"
        )
        (st.warning if "not" in p["kind"] else st.info)(line)
        st.caption(f"calibration: {p['calibration']}  \nvalidation: {p['validation']}")
    with st.expander("manifests"):
        for run in runs:
            st.markdown(f"**{run.label}**")
            st.json(run.manifest, expanded=False)


def _cdf_chart(runs: list[data.Run], metric: str) -> alt.Chart | None:
    frames = []
    for run in runs:
        x, y = data.thin(*data.cdf(run, metric))
        if len(x):  # from 0 at the smallest value: a single value still draws a step
            x, y = np.r_[x[0], x], np.r_[0.0, y]
            frames.append(pd.DataFrame({"value": x, "fraction": y, "run": run.label}))
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    chart: alt.Chart = (
        alt.Chart(df, title=LABELS[metric])
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("value:Q", title=LABELS[metric], scale=alt.Scale(zero=False)),
            y=alt.Y("fraction:Q", title="fraction of requests", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("run:N", title=None),
        )
        .properties(height=260)
    )
    return chart


def _cdfs(runs: list[data.Run]) -> None:
    cols = st.columns(2)
    for i, metric in enumerate(data.LATENCIES):
        chart = _cdf_chart(runs, metric)
        with cols[i % 2]:
            if chart is None:
                st.caption(f"{LABELS[metric]}: no values")
            else:
                st.altair_chart(chart, width="stretch")


def _timeline(runs: list[data.Run], scenario: str) -> None:
    with_series = [r for r in runs if r.series]
    if not with_series:
        st.caption("no per-iteration series (simulation.timeseries: false)")
        return
    pick = st.selectbox("run", [r.label for r in with_series], key="timeline_run")
    run = next(r for r in with_series if r.label == pick)
    replicas = sorted({int(v) for v in run.series.get("replica", [0])})
    replica = None
    if len(replicas) > 1:
        choice = st.selectbox("replica", ["all", *replicas], key="timeline_replica")
        replica = None if choice == "all" else int(str(choice))
    t = data.timeline(run, replica)
    df = pd.DataFrame(t)
    st.caption(f"{len(run.series['start_s'])} iterations; each point is the largest value "
               "among the iterations it stands for")  # fmt: skip
    charts = [
        ("batch_seqs", "sequences in the batch"),
        ("prefill_tokens", "prefill tokens"),
        ("kv_blocks", "KV blocks in use"),
        ("waiting", "queue (waiting requests)"),
    ]
    cols = st.columns(2)
    for i, (col, title) in enumerate(charts):
        if col not in df:
            continue
        chart = (
            alt.Chart(df, title=title)
            .mark_line(interpolate="step-after")
            .encode(
                x=alt.X("start_s:Q", title="simulated time (s)"),
                y=alt.Y(f"{col}:Q", title=None, axis=alt.Axis(format="~s")),
            )
            .properties(height=200)
        )
        with cols[i % 2]:
            st.altair_chart(chart, width="stretch")
    trace = run.folder / "trace_events.json" if run.folder else None
    if trace is not None and trace.is_file():
        st.caption(f"Iteration by iteration: open `{trace}` in ui.perfetto.dev")
    else:
        st.caption(
            "Iteration by iteration: `lyra-simpy run <scenario file> --trace-events` writes "
            f"results/{scenario}/<variant>/trace_events.json for ui.perfetto.dev"
        )


def _figures(scenario: str) -> None:
    folder = _where("FIGURES", "figures")
    found = sorted(folder.glob(f"{scenario}_*.png")) if folder.is_dir() else []
    if not found:
        st.caption(f"no figures of {scenario} in {folder}/ (lyra-simpy run draws them)")
    for path in found:
        st.image(str(path), caption=path.name)


def _progress_loop(raw: dict[str, Any], base: Path) -> data.Run:
    """Simulate *raw* in a worker thread; the page shows simulated time meanwhile."""
    from lyra_simpy.scenario import scenario_from_dict
    from lyra_simpy.simulation import simulate

    scenario = scenario_from_dict(raw, base)
    clock: dict[str, Any] = {}
    box: dict[str, Any] = {}

    def watch(env: Any) -> Any:
        from contextlib import nullcontext

        clock["env"] = env
        return nullcontext()

    def work() -> None:
        try:
            box["res"] = simulate(scenario, watch)
        except Exception as exc:  # shown on the page, not lost in the thread
            box["error"] = exc

    wl = raw.get("workload", {})
    rate = (wl.get("arrival") or {}).get("rate_per_s")
    n = wl.get("num_requests")
    horizon = scenario.simulation.until_s or (n / rate if n and rate else None)
    bar = st.progress(0.0, text="simulating")
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
        now = float(clock["env"].now) if "env" in clock else 0.0
        frac = min(now / horizon, 1.0) if horizon else 0.0
        bar.progress(
            frac, text=f"simulated {now:.1f} s" + (f" of ~{horizon:.0f} s" if horizon else "")
        )
    bar.progress(1.0, text="done")
    if "error" in box:
        raise box["error"]
    return data.from_results(box["res"], scenario.label)


def _rerun(runs: list[data.Run]) -> None:
    sims = [r for r in runs if r.manifest.get("scenario")]
    if not sims:
        st.caption("pick a simulated variant to rerun")
        return
    pick = st.selectbox("start from", [r.label for r in sims], key="rerun_base")
    base = next(r for r in sims if r.label == pick)
    sc = base.manifest["scenario"]
    seats, budget = data.seats_and_budget(sc.get("scheduler", {}))
    from lyra_simpy.policies import SCHEDULERS

    c1, c2, c3 = st.columns(3)
    knobs: dict[str, Any] = {}
    arrival = sc.get("workload", {}).get("arrival", {})
    with c1:
        if "rate_per_s" in arrival:
            knobs["rate_per_s"] = st.number_input(
                "arrival rate (req/s)", min_value=0.01, value=float(arrival["rate_per_s"])
            )
        names = list(SCHEDULERS)
        current = sc.get("scheduler", {}).get("name", names[0])
        knobs["scheduler"] = st.selectbox("scheduler", names, index=names.index(current))
    with c2:
        knobs["max_num_seqs"] = st.number_input("max_num_seqs", min_value=1, value=int(seats or 16))
        if budget is not None:
            knobs["max_num_batched_tokens"] = st.number_input(
                "token budget (max_num_batched_tokens)", min_value=1, value=int(budget)
            )
    with c3:
        blocks = sc.get("kv_cache", {}).get("num_blocks")
        if isinstance(blocks, int):
            knobs["num_blocks"] = st.number_input("KV blocks", min_value=1, value=blocks)
        slo = sc.get("slo", {})
        for key in ("ttft_ms", "tpot_ms"):
            value = st.number_input(f"SLO {key}", min_value=0.0, value=float(slo.get(key) or 0.0))
            knobs[key] = value or None
    if st.button("Rerun in quick mode", type="primary"):
        from lyra_simpy.errors import LyraError

        raw = data.rerun_raw(base.manifest, knobs, _where("REPO", "."))
        try:
            result = _progress_loop(raw, _where("REPO", "."))
        except (LyraError, ValueError) as exc:
            st.warning(f"not run: {str(exc).splitlines()[0]}")
            return
        st.session_state.setdefault("reruns", []).append(result)
        st.rerun()  # the new run joins the tables and charts


def _sim_vs_real() -> None:
    """A validation workload (docs/validation): the simulation over the real runs, and
    the error of each metric against the real runs' own spread."""
    from lyra_simpy.live.compare import compare
    from lyra_simpy.paper.validation import find_validation_runs

    found = find_validation_runs(_where("REPO", ".") / "docs" / "validation")
    if not found:
        st.caption("no docs/validation/ runs here (tox -e validate-cpu writes them); overlay "
                   "your own real runs from the sidebar")  # fmt: skip
        return
    pick = str(st.selectbox("validation workload", list(found), key="validation"))
    sim_dir, real_dirs = found[pick]
    runs = [_run(sim_dir, "simulated")]
    runs += [_run(d, f"real {d.name}") for d in real_dirs]
    table = pd.DataFrame(compare(sim_dir, real_dirs)).drop(columns=["runs"])
    table["error %"] = (table.pop("error") * 100).round(1)
    table["real spread ±%"] = (table.pop("spread") * 100).round(1)
    st.caption(f"error: simulation vs the median of {len(real_dirs)} real runs; spread: the "
               "largest distance of one real run from that median (the floor under which an "
               "error says nothing)")  # fmt: skip
    st.dataframe(table, hide_index=True, width="stretch")
    _cdfs(runs)
    p = data.provenance(runs[0].manifest, _where("REPO", "."))
    st.caption(f"simulated with cost model `{p['cost']}`: {p['calibration']}")


def main() -> None:
    st.set_page_config(page_title="lyra-simpy explorer", layout="wide")
    results = _where("RESULTS", "results")
    names = data.scenarios(results)
    st.sidebar.title("lyra-simpy")
    if not names:
        st.info(f"No results in {results}/: run `tox -e scenarios` or `lyra-simpy run FILE` first.")
        return
    # ?scenario=NAME&variants=A,B in the address picks the first view (a shareable link)
    asked = st.query_params.get("scenario")
    first = names.index(asked) if asked in names else 0
    scenario = str(st.sidebar.selectbox("scenario", names, index=first))
    labels = data.variants(results / scenario)
    wanted = [v for v in str(st.query_params.get("variants", "")).split(",") if v in labels]
    chosen = st.sidebar.multiselect("variants (overlay)", labels, default=wanted or labels[:2])
    real = st.sidebar.text_input("real runs to overlay (folders, comma separated)", "")
    runs = [_run(results / scenario / label, label) for label in chosen]
    for folder in filter(None, (p.strip() for p in real.split(","))):
        path = Path(folder)
        if (path / "requests.jsonl").is_file():
            runs.append(_run(path, f"real: {path.name}"))
        else:
            st.sidebar.caption(f"{folder}: no requests.jsonl")
    runs += [
        r for r in st.session_state.get("reruns", []) if r.manifest["scenario"]["name"] == scenario
    ]
    st.title(scenario)
    if runs and runs[0].manifest.get("scenario", {}).get("description"):
        st.caption(runs[0].manifest["scenario"]["description"])
    if not runs:
        st.caption("pick variants in the sidebar")
        return
    _provenance(runs)
    tabs = st.tabs(["Summary", "Latency CDFs", "Timeline", "Figures", "Rerun", "Sim vs real"])
    with tabs[0]:
        st.dataframe(pd.DataFrame(data.summary_table(runs)), hide_index=True, width="stretch")
    with tabs[1]:
        _cdfs(runs)
    with tabs[2]:
        _timeline(runs, scenario)
    with tabs[3]:
        _figures(scenario)
    with tabs[4]:
        _rerun(runs)
    with tabs[5]:
        _sim_vs_real()
