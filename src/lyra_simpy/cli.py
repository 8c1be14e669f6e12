"""Command line: ``lyra-simpy run|validate|schema``. Parses and delegates; nothing else.

Errors that are the user's (a bad scenario, a missing trace) print one line to stderr
and exit with status 2; no result folder is written for a scenario that failed.
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
    return p


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
