"""Command line: ``lyra-simpy run|validate|schema|calibrate|vidur-profile|replay|profile|compare``.

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
from pathlib import Path

from lyra_simpy.errors import LyraError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lyra-simpy", description=__doc__.split("\n")[0])
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

    val = sub.add_parser("validate", help="check scenario files without simulating")
    val.add_argument("scenarios", nargs="+", type=Path)
    val.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    val.add_argument("--quick", action="store_true")

    sub.add_parser("schema", help="print the JSON Schema of the scenario format")

    cal = sub.add_parser("calibrate", help="fit the profile cost model to a profile CSV")
    cal.add_argument("profile", type=Path, help="profile CSV (DESIGN §4) with metadata YAML")
    cal.add_argument("--out", type=Path, help="write the fit here (YAML, for cost.path)")
    cal.add_argument("--figure", type=Path, help="write the residual figure here (.png/.pdf)")

    vid = sub.add_parser("vidur-profile", help="profile CSV from a Vidur mlp.csv")
    vid.add_argument("mlp_csv", type=Path, help="Vidur data/profiling/compute/.../mlp.csv")
    vid.add_argument("--out", type=Path, required=True, help="profile CSV to write")
    vid.add_argument("--layers", type=_count, required=True, help="transformer layers")
    vid.add_argument("--tp", type=_count, default=1, help="tensor-parallel degree (rows)")
    vid.add_argument(
        "--decode-attention-ms-per-context-token",
        type=_ms,
        default=0.0,
        help="assumed decode attention time per context token read (default 0: none)",
    )
    vid.add_argument(
        "--prefill-attention-ms-per-pair",
        type=_ms,
        default=0.0,
        help="assumed prefill attention time per new x (cached + new) pair (default 0)",
    )
    rep = sub.add_parser("replay", help="send a scenario's workload to a live endpoint")
    rep.add_argument("scenario", type=Path, help="scenario YAML (one variant)")
    rep.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8080")
    rep.add_argument("--api", choices=["openai", "sglang"], default="openai")
    rep.add_argument("--out", type=Path, help="results folder (default results/live/NAME)")
    rep.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    rep.add_argument("--quick", action="store_true", help="apply the file's quick: block")
    rep.add_argument("--timeout-s", type=_seconds, default=60.0, help="per request (60)")
    rep.add_argument("--time-limit-s", type=_seconds, default=1800.0, help="whole run (1800)")
    rep.add_argument("--max-in-flight", type=_count, default=256, help="requests at once")
    rep.add_argument("--extra-body", type=_json_object, default={}, help="JSON merged into bodies")

    prof = sub.add_parser("profile", help="measure a live engine's step costs: profile CSV")
    prof.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8080")
    prof.add_argument("--api", choices=["openai", "sglang"], default="openai")
    prof.add_argument("--out", type=Path, required=True, help="profile CSV (+ .yaml beside)")
    prof.add_argument("--grid", type=Path, help="YAML of a ProfileGrid (default: built in)")
    prof.add_argument("--hardware", default=None, help="hardware name for the metadata")
    prof.add_argument("--flags", default="", help="the engine's command line, for the metadata")

    cmp_ = sub.add_parser("compare", help="relative error of a simulation against real runs")
    cmp_.add_argument("sim_dir", type=Path, help="simulated run folder (summary.json ...)")
    cmp_.add_argument("real_dirs", type=Path, nargs="+", help="replayed run folders (median)")
    cmp_.add_argument("--figure", type=Path, help="overlaid CDFs (.png/.pdf)")
    cmp_.add_argument("--json", type=Path, help="write the comparison table as JSON")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number > 0 (s)")
    return value


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a JSON object")
    return value


def _replay(args: argparse.Namespace) -> int:
    from lyra_simpy.live.replay import ReplayConfig, replay
    from lyra_simpy.scenario import load_scenario

    scenario = load_scenario(args.scenario, args.overrides, args.quick)
    variants = scenario.expand()
    if len(variants) != 1:
        raise LyraError(f"{args.scenario}: has {len(variants)} variants, replay takes one")
    cfg = ReplayConfig(
        endpoint=args.endpoint,
        api=args.api,
        timeout_s=args.timeout_s,
        time_limit_s=args.time_limit_s,
        max_in_flight=args.max_in_flight,
        extra_body=args.extra_body,
    )
    out = args.out or Path("results") / "live" / scenario.name
    try:
        summary, complete = replay(variants[0], cfg, out, str(args.scenario))
    except KeyboardInterrupt:
        print(f"interrupted: partial results in {out}/ (manifest: complete false)")
        return 130
    print(
        f"{summary['completed']} ok, {summary['unfinished']} unfinished; "
        f"median TTFT {summary['median_ttft_ms']:.1f} ms, median TPOT "
        f"{summary['median_tpot_ms']:.2f} ms, {summary['output_throughput']:.1f} tok/s"
    )
    print(f"results: {out}/" + ("" if complete else " (incomplete: stopped early)"))
    return 0 if complete else 1


def _profile(args: argparse.Namespace) -> int:
    from lyra_simpy.live.profile import ProfileGrid, load_grid, profile

    grid = load_grid(args.grid) if args.grid else ProfileGrid()
    rows, source = profile(args.endpoint, args.api, grid, args.out, args.hardware, args.flags)
    print(f"wrote {args.out} ({rows} rows, timings: {source}) and {args.out.with_suffix('.yaml')}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from lyra_simpy.live.compare import compare, format_comparison

    table = compare(args.sim_dir, args.real_dirs, args.figure, args.json)
    print(format_comparison(table))
    for path in (args.figure, args.json):
        if path is not None:
            print(f"wrote {path}")
    return 0


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, must be an integer >= 1")
    return int(text)


def _ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number >= 0 (ms)")
    return value


def _calibrate(args: argparse.Namespace) -> int:
    from lyra_simpy.calibration.fitfile import calibrate, format_report

    fit = calibrate(args.profile, args.out, args.figure)
    print(format_report(fit, str(args.profile)))
    for path in (args.out, args.figure):
        if path is not None:
            print(f"wrote {path}")
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


def _expand(paths: list[Path]) -> list[Path]:
    """Scenario files named, with each folder standing for its ``*.yaml`` files."""
    out: list[Path] = []
    for path in paths:
        out.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "schema":
            from lyra_simpy.scenario import Scenario

            print(json.dumps(Scenario.model_json_schema(), indent=2))
            return 0
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "vidur-profile":
            return _vidur_profile(args)
        if args.command in ("replay", "profile", "compare"):
            return {"replay": _replay, "profile": _profile, "compare": _compare}[args.command](args)
        from lyra_simpy.scenario import load_scenario

        # Validate every file (and every variant) before simulating any.
        paths = _expand(args.scenarios)
        scenarios = [(path, load_scenario(path, args.overrides, args.quick)) for path in paths]
        if args.command == "validate":
            for path, sc in scenarios:
                print(f"{path}: ok ({len(sc.expand())} run(s))")
            return 0
        from lyra_simpy.runner import run_scenario

        for path, sc in scenarios:
            run_scenario(sc, args.out, None if args.no_figures else args.figures, str(path))
            print()
        return 0
    except LyraError as exc:
        print(f"lyra-simpy: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0


if __name__ == "__main__":
    sys.exit(main())
