"""``lyra-simpy figures``: bring the scenarios' results up to date, draw every figure of
:data:`~lyra_simpy.paper.PAPER_FIGURES` as PDF and PNG, and write the README listing them.

A scenario's results are *stale* when a variant's folder or manifest is missing, its
resolved scenario differs from the one the manifest records, or the manifest was written
by another package version or git revision; stale scenarios are rerun with
:func:`~lyra_simpy.output.writer.run_scenario`, fresh ones are reused. (A revision ending in
``-dirty`` does not tell two uncommitted states apart: ``rerun=True`` forces the runs.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from lyra_simpy.errors import LyraError
from lyra_simpy.output.provenance import git_revision, package_version
from lyra_simpy.output.style import save
from lyra_simpy.output.writer import run_scenario
from lyra_simpy.paper import PAPER_FIGURES, FigureInputs, MissingInputError
from lyra_simpy.scenario import Scenario, load_scenario

FORMATS = (".png", ".pdf")
"""Every figure is written in each: PNG for READMEs, PDF for the paper. PNG first: a
later save may lay the figure out again, and the PNG then matches ``lyra-simpy run``'s."""


def check_names(names: Sequence[str]) -> None:
    """Fail with the allowed names when one of *names* is not a registered figure."""
    for name in names:
        if name not in PAPER_FIGURES:
            raise LyraError(f"--only: got {name!r}, must be one of: {', '.join(PAPER_FIGURES)}")


def stale_reason(scenario: Scenario, folder: Path) -> str | None:
    """Why the results of *scenario* in *folder* cannot be reused (None: they can)."""
    for variant in scenario.expand():
        path = folder / variant.label / "manifest.json"
        if not path.is_file():
            return "no results"
        info = json.loads(path.read_text())
        if info.get("scenario") != json.loads(json.dumps(variant.resolved())):
            return "scenario changed"
        if info.get("version") != package_version() or info.get("git_revision") != git_revision():
            return "code changed"
    return None


def readme(names: Sequence[str] = tuple(PAPER_FIGURES)) -> str:
    """The figures/README.md text: every figure, what it shows and how it is made."""
    lines = [
        "# Figures",
        "",
        "Every file here is drawn by `lyra-simpy figures` (`tox -e figures`) from the",
        "registry in `src/lyra_simpy/paper/__init__.py`: PDF for the paper, PNG for",
        "READMEs, one style (`src/lyra_simpy/output/style.py`), identical bytes on rerun. It runs",
        "the scenarios whose results in `results/` are missing or stale (full size; add",
        "`--quick` for the short runs) and writes this file. Do not edit by hand.",
        "",
        "| figure | shows | made from | command |",
        "|---|---|---|---|",
    ]
    for name in names:
        fig = PAPER_FIGURES[name]
        inputs = [f"`scenarios/{s}.yaml`" for s in fig.scenarios] + [f"`{e}`" for e in fig.extra]
        command = f"`lyra-simpy figures --only {name}`"
        if fig.before:
            command = f"`{fig.before}`, then {command}"
        lines.append(
            f"| [{name}]({name}.png) ([pdf]({name}.pdf)) | {fig.caption} | "
            f"{', '.join(inputs)} | {command} |"
        )
    return "\n".join(lines) + "\n"


def build(
    names: Sequence[str] = (),
    scenarios_dir: Path = Path("scenarios"),
    results_dir: Path = Path("results"),
    out_dir: Path = Path("figures"),
    quick: bool = False,
    rerun: bool = False,
    echo: Callable[[str], None] = print,
) -> list[Path]:
    """Draw the figures *names* (default: every one) into *out_dir*; return the files
    written. Scenarios come from *scenarios_dir* (the repository root is its parent)
    and their results live in *results_dir*; *quick* applies each scenario's ``quick:``
    block. A figure whose inputs are absent is skipped with one line through *echo*."""
    check_names(names)
    selected = list(names) or list(PAPER_FIGURES)
    needed = dict.fromkeys(s for n in selected for s in PAPER_FIGURES[n].scenarios)
    scenarios = {
        name: load_scenario(scenarios_dir / f"{name}.yaml", quick=quick) for name in needed
    }
    for name, sc in scenarios.items():
        reason = "--rerun" if rerun else stale_reason(sc, results_dir / name)
        if reason is not None:
            echo(f"running {name} ({reason})")
            path = str(scenarios_dir / f"{name}.yaml")
            run_scenario(sc, results_dir, None, path, echo=lambda _line: None)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in selected:
        inputs = FigureInputs(name, results_dir, scenarios, scenarios_dir.resolve().parent)
        try:
            fig = PAPER_FIGURES[name].draw(inputs)
        except MissingInputError as exc:
            echo(f"skipped {name}: {exc}")
            continue
        paths = [out_dir / f"{name}{suffix}" for suffix in FORMATS]
        save(fig, *paths)
        written.extend(paths)
        echo(f"figure: {out_dir / name}.{{png,pdf}}")
    (out_dir / "README.md").write_text(readme())
    return written
