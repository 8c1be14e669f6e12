"""The live-endpoint subcommands of the command line: ``replay``, ``profile``,
``speed``, ``compare`` (parsers and handlers; :mod:`lyra_simpy.cli` wires them in)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lyra_simpy.argtypes import count, seconds
from lyra_simpy.errors import LyraError


def add_live_parsers(sub: Any) -> None:
    """The four subcommands' parsers."""
    rep = sub.add_parser("replay", help="send a scenario's workload to a live endpoint")
    rep.add_argument(
        "scenario", type=Path, nargs="+", help="scenario YAML (one variant); several: in turn"
    )
    rep.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8080")
    # (no defaults here: what is not given takes ReplayConfig's, the one place they live)
    rep.add_argument("--api", choices=["openai", "sglang"], help="request format (openai)")
    rep.add_argument(
        "--out",
        type=Path,
        help="results folder (default results/live/NAME); with several scenarios the folder "
        "that holds each one's NAME/ (default results/live)",
    )
    rep.add_argument(
        "--repeats",
        type=count,
        default=1,
        help="runs of each scenario (1), round by round: every scenario's first run, then "
        "every scenario's second, ...; run K goes to NAME/runK with its own prompt seed",
    )
    rep.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    rep.add_argument("--quick", action="store_true", help="apply the file's quick: block")
    rep.add_argument("--timeout-s", type=seconds, help="per request (ReplayConfig: 60)")
    rep.add_argument("--time-limit-s", type=seconds, help="whole run (ReplayConfig: 1800)")
    rep.add_argument("--max-in-flight", type=count, help="requests at once (ReplayConfig: 256)")
    rep.add_argument("--extra-body", type=_json_object, help="JSON merged into bodies")
    rep.add_argument(
        "--token-ids", type=_id_range, help="prompt ids LOW:HIGH (default 1000:30000, fitted)"
    )
    rep.add_argument("--vocab-size", type=count, help="the model's vocabulary (vLLM: config.json)")
    rep.add_argument(
        "--prompt-seed",
        type=_seed,
        help="seed of the prompts' token ids (default: the scenario's); give each repeat its "
        "own against a server that keeps prompts it has seen (llama.cpp's --cache-ram)",
    )

    prof = sub.add_parser("profile", help="measure a live engine's step costs: profile CSV")
    prof.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8080")
    prof.add_argument("--api", choices=["openai", "sglang"], default="openai")
    prof.add_argument("--out", type=Path, required=True, help="profile CSV (+ .yaml beside)")
    prof.add_argument("--grid", type=Path, help="YAML of a ProfileGrid (default: built in)")
    prof.add_argument("--hardware", default=None, help="hardware name for the metadata")
    prof.add_argument("--flags", default="", help="the engine's command line, for the metadata")
    prof.add_argument("--vocab-size", type=count, help="the model's vocabulary (vLLM: config.json)")

    spd = sub.add_parser(
        "speed", help="the host's speed now over a profile's: cost.speed for the next load"
    )
    spd.add_argument("profile", type=Path, help="profile CSV with a speed_reference (+ .yaml)")
    spd.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:8080")
    spd.add_argument("--api", choices=["openai", "sglang"], default="openai")
    spd.add_argument("--grid", type=Path, help="the profile's grid YAML (its extra_body, ids)")
    spd.add_argument("--probes", type=count, default=6, help="reference requests sent (6)")
    spd.add_argument(
        "--batch",
        type=count,
        help="time B sequences decoding together (their mean step, each of the grid's "
        "decode contexts, --probes rounds) against the profile's row for B instead",
    )
    spd.add_argument(
        "--prompt",
        type=count,
        metavar="N",
        help="time a lone prompt of N tokens (--probes times) against the profile's prefill "
        "row for it instead: cost.prompt_speed, for the steps that carry prompt tokens",
    )
    spd.add_argument(
        "--beside",
        type=count,
        metavar="B",
        help="with --prompt: time the prompt beside B sequences decoding (the steps a "
        "load's prompts run in) against the profile's mixed rows for it instead",
    )
    spd.add_argument("--pause-s", type=seconds, default=5.0, help="between them (5)")
    spd.add_argument("--json", type=Path, help="write the reading as JSON")
    spd.add_argument("--vocab-size", type=count, help="the model's vocabulary (vLLM: config.json)")

    cmp_ = sub.add_parser("compare", help="relative error of a simulation against real runs")
    cmp_.add_argument("sim_dir", type=Path, help="simulated run folder (summary.json ...)")
    cmp_.add_argument("real_dirs", type=Path, nargs="+", help="replayed run folders (median)")
    cmp_.add_argument("--figure", type=Path, help="overlaid CDFs (.png/.pdf)")
    cmp_.add_argument("--json", type=Path, help="write the comparison table as JSON")
    cmp_.add_argument(
        "--band",
        type=Path,
        metavar="SCENARIO",
        help="simulate SCENARIO (its cost.jitter on) --seeds times: a band per metric",
    )
    cmp_.add_argument("--seeds", type=count, default=10, help="noise draws for --band (10)")
    cmp_.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE")
    cmp_.add_argument(
        "--quick", action="store_true", help="with --band or --steps: the quick: block"
    )
    cmp_.add_argument(
        "--steps",
        type=Path,
        metavar="SCENARIO",
        help="rebuild the real runs' engine steps from their streams and price each with "
        "SCENARIO's cost model: do the steps cost what the model charges?",
    )


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a JSON object")
    return value


def _id_range(text: str) -> Any:
    from lyra_simpy.live.workload import TokenIds

    low, colon, high = text.partition(":")
    if colon and low.isdigit() and high.isdigit() and 0 < int(low) < int(high):
        return TokenIds(low=int(low), high=int(high))
    raise argparse.ArgumentTypeError(f"got {text!r}, must be LOW:HIGH with 0 < LOW < HIGH")


def _seed(text: str) -> int:
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"got {text!r}, must be an integer >= 0")


def replay_plan(
    scenarios: list[tuple[str, int]], repeats: int, out: Path | None, prompt_seed: int | None
) -> list[tuple[int, int, Path, int | None]]:
    """The runs ``lyra-simpy replay`` makes of *scenarios* (each its name and seed, in the
    order given), *repeats* times, as (scenario's place, run number, results folder, prompt
    seed): round by round — every scenario's run 1, then every scenario's run 2, ... — so
    that a host that wanders over minutes moves every scenario's runs alike instead of all
    the runs of one (docs/VALIDATION-llamacpp.md item 86). One scenario run once keeps
    ``--out`` (default ``results/live/NAME``) and ``--prompt-seed`` as given. Otherwise a
    scenario's runs go to ``NAME/runK`` under ``--out`` with one scenario (default
    ``results/live/NAME``), to ``NAME/`` or ``NAME/runK`` under ``--out`` with several
    (default ``results/live``); run *K* of the *i*-th scenario sends the prompt ids of
    seed *S* + 1000 (*i* − 1) + (*K* − 1), *S* being ``--prompt-seed`` or else the
    scenario's seed, so that no two runs send the same prompts to a server that keeps
    the prompts it has seen (llama.cpp's ``--cache-ram``: item 84)."""
    if len(scenarios) == 1 and repeats == 1:
        return [(0, 1, out or Path("results") / "live" / scenarios[0][0], prompt_seed)]
    plan: list[tuple[int, int, Path, int | None]] = []
    for k in range(1, repeats + 1):
        for i, (name, seed) in enumerate(scenarios):
            if len(scenarios) == 1:
                folder = (out or Path("results") / "live" / name) / f"run{k}"
            else:
                folder = (out or Path("results") / "live") / name
                folder = folder / f"run{k}" if repeats > 1 else folder
            base = seed if prompt_seed is None else prompt_seed
            plan.append((i, k, folder, base + 1000 * i + (k - 1)))
    return plan


def _replay(args: argparse.Namespace) -> int:
    from lyra_simpy.live.replay import ReplayConfig, replay
    from lyra_simpy.metrics.summary import number
    from lyra_simpy.scenario import load_scenario

    loaded = []
    for path in args.scenario:  # (every file checked before anything is sent)
        scenario = load_scenario(path, args.overrides, args.quick)
        variants = scenario.expand()
        if len(variants) != 1:
            raise LyraError(f"{path}: has {len(variants)} variants, replay takes one")
        loaded.append((path, scenario.name, variants[0]))
    names = [name for _, name, _ in loaded]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise LyraError(
            f"scenario: two of the files are named {twice!r}, and each one's runs go to its "
            "NAME/ folder: give each scenario its own name"
        )
    given = {
        "api": args.api,
        "timeout_s": args.timeout_s,
        "time_limit_s": args.time_limit_s,
        "max_in_flight": args.max_in_flight,
        "extra_body": args.extra_body,
        "token_ids": args.token_ids,
        "vocab_size": args.vocab_size,
    }
    cfg = ReplayConfig(endpoint=args.endpoint, **{k: v for k, v in given.items() if v is not None})
    plan = replay_plan(
        [(name, v.seed) for _, name, v in loaded], args.repeats, args.out, args.prompt_seed
    )
    several = len(plan) > 1
    failed = 0
    for i, k, out, seed in plan:
        path, name, variant = loaded[i]
        if several:
            print(f"{name}: run {k} of {args.repeats}, prompt seed {seed}")
        try:
            summary, complete = replay(
                variant, cfg.model_copy(update={"prompt_seed": seed}), out, str(path)
            )
        except KeyboardInterrupt:
            print(f"interrupted: partial results in {out}/ (manifest: complete false)")
            return 130
        ttft, tpot, thru = (
            number(summary[key])
            for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput")
        )
        print(
            f"{summary['completed']} ok, {summary['unfinished']} unfinished; "
            f"median TTFT {ttft:.1f} ms, median TPOT {tpot:.2f} ms, {thru:.1f} tok/s"
        )
        ways = json.loads((out / "manifest.json").read_text()).get("token_counting", {})
        if ways.get("usage"):
            print(
                f"note: {ways['usage']} request(s) counted by usage.completion_tokens, which the "
                "stream's chunks did not match (counted_by: usage in requests.jsonl; no ITLs)"
            )
        print(f"results: {out}/" + ("" if complete else " (incomplete: stopped early)"))
        failed += not complete
    if several and failed:
        print(f"{failed} of {len(plan)} runs stopped early")
    return 0 if not failed else 1


def _profile(args: argparse.Namespace) -> int:
    from lyra_simpy.live.profile import profile
    from lyra_simpy.live.profile_grid import ProfileGrid, load_grid

    grid = load_grid(args.grid) if args.grid else ProfileGrid()
    rows, source = profile(
        args.endpoint, args.api, grid, args.out, args.hardware, args.flags, args.vocab_size
    )
    print(f"wrote {args.out} ({rows} rows, timings: {source}) and {args.out.with_suffix('.yaml')}")
    return 0


def _speed(args: argparse.Namespace) -> int:
    from lyra_simpy.live.profile_grid import ProfileGrid, load_grid
    from lyra_simpy.live.speed import batch_speed, host_speed
    from lyra_simpy.live.speed_prompt import beside_speed, prompt_speed
    from lyra_simpy.metrics.io import atomic_write

    if args.batch is not None and args.prompt is not None:
        raise LyraError(
            f"speed: got --batch {args.batch} and --prompt {args.prompt}, give one (a decode "
            "reading or a prompt reading)"
        )
    if args.beside is not None and args.prompt is None:
        raise LyraError(
            f"speed: got --beside {args.beside} without --prompt, give the prompt's tokens "
            "(--prompt N --beside B)"
        )
    grid = load_grid(args.grid) if args.grid else ProfileGrid()
    common = (args.probes, args.pause_s, args.vocab_size)
    if args.beside is not None:
        got = beside_speed(
            args.endpoint, args.api, args.profile, grid, args.beside, args.prompt, *common
        )
        what = f"prompts of {args.prompt} tokens beside {args.beside} decoding"
    elif args.prompt is not None:
        got = prompt_speed(args.endpoint, args.api, args.profile, grid, args.prompt, *common)
        what = f"lone prompts of {args.prompt} tokens"
    elif args.batch is None:
        got = host_speed(args.endpoint, args.api, args.profile, grid, *common)
        what = "lone decode steps"
    else:
        got = batch_speed(args.endpoint, args.api, args.profile, grid, args.batch, *common)
        what = f"lock-step mean steps of {args.batch} sequences"
    print(
        f"host now: {got.now_ms:.2f} ms, the {got.statistic} of {len(got.steps_ms)} {what} "
        f"({min(got.steps_ms):.2f}-{max(got.steps_ms):.2f}); the profile's "
        f"{got.profile_ms:.2f} ms"
        + (" (its beside reference)" if got.against == "beside reference" else "")
    )
    print(
        f"{got.field}: {got.speed:.3f}  (lyra-simpy run SCENARIO --set {got.field}={got.speed:.3f})"
    )
    if args.json is not None:
        text = json.dumps(got.as_json(), indent=2) + "\n"
        atomic_write(args.json, lambda tmp: tmp.write_text(text))
        print(f"wrote {args.json}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from lyra_simpy.live.compare import METRICS, compare, format_comparison

    bands = None
    if args.band is not None:
        from lyra_simpy.live.band import band
        from lyra_simpy.scenario import load_scenario

        scenario = load_scenario(args.band, args.overrides, args.quick)
        variants = scenario.expand()
        if len(variants) != 1:
            raise LyraError(f"{args.band}: has {len(variants)} variants, --band takes one")
        bands = band(variants[0], args.seeds, METRICS)
    table = compare(args.sim_dir, args.real_dirs, args.figure, args.json, bands)
    print(format_comparison(table))
    if bands is not None:
        n = args.seeds
        print(f"band: min-max of {n} noise draws (covers a further draw {(n - 1) / (n + 1):.0%})")
    steps_json = None
    if args.steps is not None:
        from lyra_simpy.live.stepcheck import format_step_check, step_check
        from lyra_simpy.scenario import load_scenario

        scenario = load_scenario(args.steps, args.overrides, args.quick)
        variants = scenario.expand()
        if len(variants) != 1:
            raise LyraError(f"{args.steps}: has {len(variants)} variants, --steps takes one")
        check = step_check(variants[0], args.real_dirs)
        print(format_step_check(check))
        if args.json is not None:
            steps_json = args.json.with_name(f"{args.json.stem}-steps.json")
            steps_json.write_text(json.dumps(check, indent=2) + "\n")
    for path in (args.figure, args.json, steps_json):
        if path is not None:
            print(f"wrote {path}")
    return 0


LIVE_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "replay": _replay,
    "profile": _profile,
    "speed": _speed,
    "compare": _compare,
}
