"""The stored llama.cpp matrix priced again by another commit of the simulator, or without
the probes' prompts-together rows (issue 12, ``docs/VALIDATION-llamacpp.md`` item 10).

``python validation/llamacpp_ablate.py [--commit REV] [--lone-probes] [--stored DIR]``
copies ``results/validation-llamacpp`` (the last matrix's profiles and real runs; or
*DIR*, a copy of such a folder kept from another run) to a temporary folder, rewrites its
stored scenarios' paths to the copy, with ``--lone-probes`` drops every profile's
``prefill`` rows of ``batch_size`` > 1 (``grid.prefill_together``), checks *REV* (default
``HEAD``) out in a temporary git worktree, runs that checkout's ``validate_cpu.py --matrix
--resimulate`` on the copy — no server: the same real runs, priced by that commit's engine
model and fits — and prints the summary table it gives. Nothing in the repository or in
``results/`` changes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "results" / "validation-llamacpp"


def lone_probes(profile: Path) -> int:
    """Drop *profile*'s prefill rows of more than one prompt; how many went."""
    lines = profile.read_text().splitlines()
    keep = [lines[0]] + [
        line
        for line in lines[1:]
        if not (line.startswith("prefill,") and line.split(",")[1] != "1")
    ]
    profile.write_text("\n".join(keep) + "\n")
    return len(lines) - len(keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpp_ablate.py")
    parser.add_argument("--commit", default="HEAD", help="the simulator's commit (default HEAD)")
    parser.add_argument("--lone-probes", action="store_true",
                        help="fit without the probes' prompts-together rows")  # fmt: skip
    parser.add_argument("--stored", type=Path, default=None,
                        help="a stored matrix (default results/validation-llamacpp)")  # fmt: skip
    args = parser.parse_args(argv)
    stored = args.stored or STORED
    if not (stored / "matrix.json").is_file():
        print(f"llamacpp_ablate.py: no stored matrix at {stored} (run validate_cpu.py --matrix)")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results, checkout = Path(tmp) / "results", Path(tmp) / "checkout"
        copy = results / "validation-llamacpp"
        shutil.copytree(stored, copy)
        for scenario in copy.rglob("*.yaml"):  # (stored scenarios name results/'s files)
            text = scenario.read_text()
            if str(ROOT / "results") in text:
                scenario.write_text(text.replace(str(ROOT / "results"), str(results)))
        if args.lone_probes:
            for profile in sorted(copy.glob("*/profile.csv")):
                print(
                    f"{profile.parent.name}: {lone_probes(profile)} prompts-together rows dropped"
                )
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(checkout), args.commit],
                       check=True)  # fmt: skip
        try:
            (checkout / "results").symlink_to(results, target_is_directory=True)
            env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
            log = Path(tmp) / "resimulate.log"
            with log.open("w") as out:
                done = subprocess.run(
                    [sys.executable, "validation/validate_cpu.py", "--matrix", "--resimulate"],
                    cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
                )  # fmt: skip
            if done.returncode:
                print(log.read_text()[-3000:])
                return done.returncode
            summary = [sys.executable, str(ROOT / "validation" / "validate_cpu.py"), "--matrix",
                       "--summary", str(copy / "matrix.json")]  # fmt: skip
            subprocess.run(summary, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(checkout)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
