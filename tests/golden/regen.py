"""Regenerate the golden summaries: ``python tests/golden/regen.py [--check] [NAME ...]``.

For every ``scenarios/*.yaml`` (or the NAMEs given, without ``.yaml``), run its ``quick``
variant set in process and write
``tests/golden/<scenario>.json``: per variant label, the vLLM-named summary and the engine
counters. Run it after a change that is *meant* to move the numbers, look at the diff
(``git diff tests/golden``), and commit the JSON with the change that explains it.
``--check`` writes nothing and exits 1 if any file would change.

``tests/golden/test_golden.py`` reads the same record back from what ``lyra-simpy run
--quick scenarios/`` wrote (:func:`golden_from_results`; the tests' one quick run of every
scenario), so the numbers a user gets are the ones checked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
GOLDEN = Path(__file__).resolve().parent

#: Engine counters kept in the golden files (wall time is not a result).
ENGINE_KEYS = ("iterations", "end_s", "peak_kv_blocks", "kv_blocks")


def golden_of(path: Path) -> dict[str, Any]:
    """The golden record of the scenario file at *path* (its quick run)."""
    from lyra_simpy import load_scenario, run_scenario

    scenario = load_scenario(path, quick=True)
    results = run_scenario(scenario, out_root=None, figures_dir=None, echo=lambda _s: None)
    return {
        "scenario": scenario.name,
        "quick": True,
        "variants": {
            res.scenario.label: {
                "summary": res.summary,
                "engine": {k: res.engine[k] for k in ENGINE_KEYS},
            }
            for res in results
        },
    }


def golden_from_results(results: Path, name: str) -> dict[str, Any]:
    """The golden record of scenario *name* from the folders ``lyra-simpy run`` wrote under
    *results* (each variant's ``summary.json`` and ``manifest.json``), in variant order."""
    found = []
    for manifest_path in (results / name).rglob("manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        summary = json.loads((manifest_path.parent / "summary.json").read_text())
        engine = {k: manifest["engine"][k] for k in ENGINE_KEYS}
        found.append((manifest["variant_index"], manifest["scenario"]["label"], summary, engine))
    found.sort(key=lambda v: v[0])
    return {
        "scenario": name,
        "quick": True,
        "variants": {
            label: {"summary": summary, "engine": engine} for _, label, summary, engine in found
        },
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--check", action="store_true", help="report changes, write nothing")
    args = parser.parse_args(argv)
    paths = [SCENARIOS / f"{n}.yaml" for n in args.names] or sorted(SCENARIOS.glob("*.yaml"))
    changed = []
    for path in paths:
        target = GOLDEN / f"{path.stem}.json"
        text = render(golden_of(path))
        old = target.read_text() if target.exists() else None
        if text != old:
            changed.append(target.name)
            if not args.check:
                target.write_text(text)
        print(f"{target.relative_to(ROOT)}: {'changed' if text != old else 'unchanged'}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
