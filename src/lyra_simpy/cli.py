"""Command line: ``lyra-simpy run|validate|schema|calibrate|vidur-profile|figures|sweep|
capacity|traces|explore|replay|profile|compare``.

Parses and delegates; nothing else.

Errors that are the user's (a bad scenario, a missing trace, an unreachable endpoint)
print one line to stderr and exit with status 2; no result folder is written for a
scenario that failed. ``replay`` exits 1 when its time limit stopped it (the records
gathered are written, marked incomplete) and 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lyra_simpy.argtypes import count, milliseconds
from lyra_simpy.errors import LyraError, ScenarioError
from lyra_simpy.live.cli import LIVE_COMMANDS, add_live_parsers

if TYPE_CHECKING:
    from lyra_simpy.scenario import Scenario


def _workers(text: str) -> int:
    """``--workers``: a count, or ``auto`` (one per core)."""
    if text == "auto":
        return os.cpu_count() or 1
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be an integer >= 1 or auto")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lyra-simpy",
        description="Simulate LLM serving with SimPy: scenarios, sweeps, capacity, "
        "calibration from profiles and live endpoints.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate scenario files: results, tables, figures")
    run.add_argument("scenarios", nargs="+", type=Path, help="scenario YAML files or folders")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. scheduler.max_num_seqs=64",
    )
    run.add_argument("--quick", action="store_true", help="apply each file's quick: block")
    run.add_argument("--out", type=Path, default=Path("results"), help="results folder")
    run.add_argument("--figures", type=Path, default=Path("figures"), help="figures folder")
    run.add_argument("--no-figures", action="store_true", help="do not draw figures")
    run.add_argument(
        "--timeseries-csv",
        action="store_true",
        help="write each run's per-iteration series as timeseries.csv too (beside the .npz)",
    )
    run.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="run each scenario's variants on N processes ('auto': one per core; default 1)",
    )
    run.add_argument(
        "--trace-events",
        action="store_true",
        help="also write each variant's trace_events.json (Perfetto, chrome://tracing)",
    )

    val = sub.add_parser("validate", help="check scenario files without simulating")
    val.add_argument("scenarios", nargs="+", type=Path)
    val.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    val.add_argument("--quick", action="store_true")

    sub.add_parser("schema", help="print the JSON Schema of the scenario format")

    cal = sub.add_parser(
        "calibrate", help="fit the profile cost model to a profile CSV and/or replayed runs"
    )
    cal.add_argument(
        "profile", type=Path, nargs="?", help="profile CSV (DESIGN §4) with metadata YAML"
    )
    cal.add_argument("--profile", dest="profile_opt", type=Path, help="the same, as an option")
    cal.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        default=[],
        metavar="DIR",
        help="replayed run folders: fit on engine steps rebuilt from their token times",
    )
    cal.add_argument(
        "--step-gap-ms",
        type=milliseconds,
        default=None,
        help="with --from-runs: token chunks further apart start a new step (default: half "
        "the shortest step each run's streams show)",
    )
    cal.add_argument(
        "--prompt-stops",
        default=None,
        metavar="N[,N...]",
        help="with --from-runs: tokens before a prompt's end where the engine cuts it into "
        "steps of its own (llama.cpp with context checkpoints: 516,4)",
    )
    cal.add_argument(
        "--prompt-budget",
        type=count,
        default=None,
        metavar="TOKENS",
        help="with --from-runs: most tokens one engine step computes (vLLM's "
        "--max-num-batched-tokens, llama.cpp's -b); a longer prompt ran in chunks in the "
        "steps before its first token (default: no limit)",
    )
    cal.add_argument(
        "--prompts-alone",
        action="store_true",
        default=None,
        help="with --from-runs: the engine computes prompts in steps of their own, never "
        "beside decodes (SGLang's default prefill-first batches); with --prompt-budget "
        "(its --chunked-prefill-size) a long prompt's chunks ran back to back before its "
        "first token",
    )
    cal.add_argument(
        "--scenario",
        type=Path,
        default=None,
        metavar="YAML",
        help="with --from-runs: a scenario whose engine served the runs; its scheduler "
        "gives the prompt stops, the prompt budget, whether prompts run alone (SGLang) "
        "and (llama.cpp) the KV cells a prompt attends over, so the steps are rebuilt as "
        "that engine ran them (--prompt-stops, --prompt-budget and --prompts-alone "
        "override)",
    )
    cal.add_argument(
        "--idle-start",
        choices=["arrival", "drop"],
        default=None,
        help="with --from-runs: a step begun idle starts at its request's send (default) "
        "or is dropped",
    )
    cal.add_argument("--out", type=Path, help="write the fit here (YAML, for cost.path)")
    cal.add_argument("--figure", type=Path, help="write the residual figure here (.png/.pdf)")
    cal.add_argument(
        "--loss",
        choices=["nnls", "soft_l1", "soft_l1_log"],
        default=None,
        help="nnls: least squares (the default for a profile); soft_l1: robust to a few "
        "outlying rows; soft_l1_log: the same on log(predicted/measured), so a row "
        "measured far too short (a step the rebuild split) weighs no more than one too "
        "long (the default with --from-runs)",
    )

    fig = sub.add_parser("figures", help="regenerate the paper figures (PNG, PDF, README)")
    fig.add_argument("--only", nargs="+", default=[], metavar="NAME", help="just these figures")
    fig.add_argument("--scenarios", type=Path, default=Path("scenarios"), help="scenarios folder")
    fig.add_argument("--results", type=Path, default=Path("results"), help="results folder")
    fig.add_argument("--out", type=Path, default=Path("figures"), help="figures folder")
    fig.add_argument("--quick", action="store_true", help="apply each scenario's quick: block")
    fig.add_argument("--rerun", action="store_true", help="rerun scenarios even if up to date")

    vid = sub.add_parser("vidur-profile", help="profile CSV from a Vidur mlp.csv")
    vid.add_argument("mlp_csv", type=Path, help="Vidur data/profiling/compute/.../mlp.csv")
    vid.add_argument("--out", type=Path, required=True, help="profile CSV to write")
    vid.add_argument("--layers", type=count, required=True, help="transformer layers")
    vid.add_argument("--tp", type=count, default=1, help="tensor-parallel degree (rows)")
    vid.add_argument(
        "--decode-attention-ms-per-context-token",
        type=milliseconds,
        default=0.0,
        help="assumed decode attention time per context token read (default 0: none)",
    )
    vid.add_argument(
        "--prefill-attention-ms-per-pair",
        type=milliseconds,
        default=0.0,
        help="assumed prefill attention time per new x (cached + new) pair (default 0)",
    )
    exp = sub.add_parser("explore", help="local app over results/ (Streamlit, 127.0.0.1)")
    exp.add_argument(
        "results", nargs="?", type=Path, default=Path("results"), help="results folder"
    )
    exp.add_argument("--figures", type=Path, default=Path("figures"), help="figures folder")
    exp.add_argument("--port", type=int, default=8501, help="port on 127.0.0.1 (default 8501)")
    _sweep_parsers(sub)
    add_live_parsers(sub)
    return p


def _executor_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    cmd.add_argument("--quick", action="store_true", help="apply the files' quick: blocks")
    cmd.add_argument(
        "--workers", type=count, help="processes (default: CPU count; 1 runs in-process)"
    )
    cmd.add_argument(
        "--dask", metavar="ADDRESS", help="run on Dask: tcp://HOST:PORT, or local (LocalCluster)"
    )


def _sweep_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    swp = sub.add_parser("sweep", help="run a grid of scenario variants over seeds (resumable)")
    swp.add_argument("sweep", type=Path, help="sweep YAML (base scenario, grid, zip, seeds)")
    _executor_args(swp)
    swp.add_argument("--out", type=Path, help="result folder (default: the file's out:)")
    swp.add_argument("--quiet", action="store_true", help="no progress bar")

    cap = sub.add_parser("capacity", help="highest rate (or fewest replicas) meeting an SLO")
    cap.add_argument("scenario", type=Path, help="scenario YAML")
    cap.add_argument("--slo", help="SLOs in ms replacing the scenario's, e.g. ttft=300,tpot=40")
    cap.add_argument("--attainment", type=float, default=0.9, help="target (default 0.9)")
    cap.add_argument(
        "--vary", default="arrival.rate", help="arrival.rate (default) or cluster.replicas"
    )
    cap.add_argument("--seeds", type=count, default=3, help="runs per probe (default 3)")
    cap.add_argument("--tolerance", type=float, default=0.02, help="relative (default 0.02)")
    _executor_args(cap)
    cap.add_argument("--out", type=Path, help="write capacity_curve.csv and capacity.png here")

    trc = sub.add_parser("traces", help="the request traces known by name: list, fetch")
    trc_sub = trc.add_subparsers(dest="traces_command", required=True)
    trc_sub.add_parser("list", help="name, size, licence, where it is, source, sha256")
    fetch = trc_sub.add_parser("fetch", help="download a known trace into the cache")
    fetch.add_argument("name", help="a name from `lyra-simpy traces list`")
    fetch.add_argument("--url", help="fetch from this URL instead (a mirror); sha256 checked")


def _sweep(args: argparse.Namespace) -> int:
    import time

    from lyra_simpy.startup import start_up

    t0 = time.perf_counter()
    with start_up():
        from lyra_simpy.sweep import load_sweep, run_sweep

        sweep = load_sweep(args.sweep, args.overrides, args.quick)
    progress = False if args.quiet else None
    rep = run_sweep(sweep, args.out, args.workers, args.dask, progress)
    print(
        f"sweep {sweep.name}: {rep.rows} rows, {rep.distinct} points: {rep.computed} computed, "
        f"{rep.distinct - rep.computed} already done ({time.perf_counter() - t0:.1f} s)"
    )
    print(f"table: {rep.table}")
    return 0


def _capacity(args: argparse.Namespace) -> int:
    from lyra_simpy.startup import start_up

    with start_up():
        from lyra_simpy.capacity import find_capacity
        from lyra_simpy.output.capacity_report import format_capacity, parse_slo, write_capacity
        from lyra_simpy.scenario import load_scenario

        scenario = load_scenario(args.scenario, args.overrides, args.quick)
    slo = parse_slo(args.slo) if args.slo else None
    cap = find_capacity(
        scenario,
        args.attainment,
        args.vary,
        slo,
        args.seeds,
        args.tolerance,
        args.workers,
        args.dask,
    )
    print(format_capacity(cap, scenario.name))
    if args.out is not None:
        for path in write_capacity(cap, args.out):
            print(f"wrote {path}")
    return 0 if cap.answer is not None else 1


def _traces(args: argparse.Namespace) -> int:
    from lyra_simpy.workload.catalog import fetch, format_list, known_traces

    if args.traces_command == "list":
        print(format_list())
        return 0
    known = known_traces()
    if args.name not in known:
        raise LyraError(f"traces fetch: got {args.name!r}, must be one of {', '.join(known)}")
    print(f"{args.name}: {fetch(known[args.name], args.url, log=sys.stderr)}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from lyra_simpy.calibration.fitfile import calibrate, format_report

    if args.profile is not None and args.profile_opt is not None:
        raise LyraError("calibrate: give the profile CSV once (positional or --profile)")
    profile = args.profile or args.profile_opt
    if args.from_runs:
        return _calibrate_runs(args, profile)
    if profile is None:
        raise LyraError("calibrate: give a profile CSV, --from-runs DIR..., or both")
    if (
        args.step_gap_ms is not None
        or args.idle_start is not None
        or args.prompt_stops
        or args.prompt_budget is not None
        or args.prompts_alone
        or args.scenario is not None
    ):
        raise LyraError(
            "calibrate: --step-gap-ms, --idle-start, --prompt-stops, --prompt-budget, "
            "--prompts-alone and --scenario need --from-runs"
        )
    fit = calibrate(profile, args.out, args.figure, args.loss or "nnls")
    print(format_report(fit, str(profile)))
    for path in (args.out, args.figure):
        if path is not None:
            print(f"wrote {path}")
    return 0


def _token_counts(text: str) -> list[int]:
    """``--prompt-stops``: positive token counts separated by commas."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(x <= 0 for x in counts):
        raise LyraError(
            f"--prompt-stops: got {text!r}; allowed: positive token counts separated by "
            "commas (e.g. 516,4)"
        )
    return counts


def _calibrate_runs(args: argparse.Namespace, profile: Path | None) -> int:
    from lyra_simpy.calibration.fitfile import format_report, write_fit
    from lyra_simpy.calibration.fitruns import RUNS_LOSS, fit_runs
    from lyra_simpy.calibration.runs import StepRebuild, rebuild_for

    if args.figure is not None:
        raise LyraError("calibrate: --figure draws a profile's residuals; not with --from-runs")
    if args.step_gap_ms is not None and args.step_gap_ms <= 0:
        raise LyraError(f"--step-gap-ms: got {args.step_gap_ms:g}, must be > 0 (ms)")
    stops = None if args.prompt_stops is None else _token_counts(args.prompt_stops)
    implied: dict[str, Any] = {}
    if args.scenario is not None:
        from lyra_simpy.scenario import load_scenario

        served = load_scenario(args.scenario)
        implied = rebuild_for(served.scheduler, served.kv_cache.block_size)
    given = {
        "gap_ms": args.step_gap_ms,
        "idle_start": args.idle_start,
        "prompt_stops": stops,
        "prompt_budget": args.prompt_budget,
        "prompts_alone": args.prompts_alone,
    }  # what is given overrides what the scenario implies
    rebuild = StepRebuild(**{**implied, **{k: v for k, v in given.items() if v is not None}})
    fit = fit_runs(args.from_runs, profile, rebuild, args.loss or RUNS_LOSS, args.out)
    print(format_report(fit))
    if args.out is not None:
        write_fit(fit, args.out)
        print(f"wrote {args.out}")
    return 0


def _vidur_profile(args: argparse.Namespace) -> int:
    from lyra_simpy.calibration.vidur import convert_vidur

    n = convert_vidur(
        args.mlp_csv,
        args.out,
        args.layers,
        args.tp,
        args.decode_attention_ms_per_context_token,
        args.prefill_attention_ms_per_pair,
    )
    print(f"wrote {args.out} ({n} rows) and {args.out.with_suffix('.yaml')}")
    return 0


def _figures(args: argparse.Namespace) -> int:
    from lyra_simpy.paper.build import build

    build(args.only, args.scenarios, args.results, args.out, args.quick, args.rerun)
    return 0


def _expand(paths: list[Path]) -> list[Path]:
    """Scenario files named, with each folder standing for its ``*.yaml`` files (a
    folder without any is an error: running nothing and exiting 0 looks like success)."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.yaml"))
            if not found:
                raise ScenarioError(f"{path}: folder has no scenario files (*.yaml)")
            out.extend(found)
        else:
            out.append(path)
    return out


def _schema(args: argparse.Namespace) -> int:
    from lyra_simpy.scenario import Scenario

    print(json.dumps(Scenario.model_json_schema(), indent=2))
    return 0


def _explore(args: argparse.Namespace) -> int:
    from lyra_simpy.explore.launch import explore

    return explore(args.results, args.figures, args.port)


def _load(args: argparse.Namespace) -> list[tuple[Path, Scenario]]:
    """Every scenario file named (folders expanded), each validated with every variant
    before anything is simulated."""
    from lyra_simpy.startup import start_up

    with start_up():
        from lyra_simpy.scenario import load_scenario

        return [
            (path, load_scenario(path, args.overrides, args.quick))
            for path in _expand(args.scenarios)
        ]


def _validate(args: argparse.Namespace) -> int:
    from lyra_simpy.refusals import possible_refusals

    for path, sc in _load(args):
        print(f"{path}: ok ({len(sc.expand())} run(s))")
        for line in possible_refusals(sc):
            print(f"lyra-simpy: warning: {line}", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    scenarios = _load(args)
    from lyra_simpy.output.progress import wanted
    from lyra_simpy.output.writer import run_scenario

    for i, (path, sc) in enumerate(scenarios, start=1):
        if len(scenarios) > 1:  # `tox -e scenarios`: which one is running
            n = len(sc.expand())
            print(f"[{i}/{len(scenarios)}] {path} ({n} run{'s' if n > 1 else ''})",
                  file=sys.stderr, flush=True)  # fmt: skip
        run_scenario(
            sc,
            args.out,
            None if args.no_figures else args.figures,
            str(path),
            timeseries_csv=args.timeseries_csv,
            trace_events=args.trace_events,
            progress=wanted(),
            workers=args.workers,
        )
        print()
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _run,
    "validate": _validate,
    "schema": _schema,
    "calibrate": _calibrate,
    "vidur-profile": _vidur_profile,
    "figures": _figures,
    "sweep": _sweep,
    "capacity": _capacity,
    "traces": _traces,
    "explore": _explore,
    **LIVE_COMMANDS,
}
"""Every command: its name (as ``_parser`` declares it) → what runs it."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except LyraError as exc:
        print(f"lyra-simpy: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0


if __name__ == "__main__":
    sys.exit(main())
