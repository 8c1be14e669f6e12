"""A kept set at the speeds read: every ratio of ``llamacpp_at_speed.py`` and the bands of
``llamacpp_noise.py``, in one file, for points whose runs are here, merged with an
earlier kept set for the others.

    PYTHONPATH=src python validation/llamacpp_at_speed_set.py --out FILE.json
        [--only CFG/REGIME ...] [--keep EARLIER.json]

For the points taken (``--only``; default: every one whose runs are here) it runs
``llamacpp_at_speed.py --ratio R --json`` for each ratio of :data:`RATIOS` and
``llamacpp_noise.py`` with each flag set of :data:`BANDS`, and writes them as
``docs/validation/llamacpp-at-speed-ITEM.json`` files are kept: per ratio its points and
commands, and ``noise_printed``'s lines by flags. With ``--keep`` the other points come
from that earlier file (their runs and the simulator unchanged since: the published
matrix's other points; their real runs may be on no machine any more): each ratio's
points and commands, and ``llamacpp_noise.py``'s line per point, its ``all`` line summed
again over the merged lines (:func:`merged_bands`). Its two closing medians over the
cells cannot be merged; the new points' whole output stays in ``new_points_printed``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from llamacpp_points import OUT, ROOT, point_folder, runs_here

RATIOS = ("runs", "mean", "gate", "gate-all", "speed", "speed-batch", "one-run", "phase",
          "one-run-phase")  # fmt: skip
"""The ratios a kept set holds (``llamacpp_at_speed.py --ratio``)."""
BANDS = (
    "--wander",
    "--wander --session",
    "--at-speed speed-batch --wander",
    "--at-speed speed-batch --wander --session",
    "--at-speed speed --wander --session",
)
"""The ``llamacpp_noise.py`` flag sets a kept set holds."""
SEGMENT = re.compile(r"T(\d) (\d+) -> (\d+) \(band (\d+)\) of (\d+)")
"""One table's figures on a ``llamacpp_noise.py`` line."""


def _script(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "validation" / name), *args],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{name} {' '.join(args)}: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def merged_bands(earlier: list[str], new: list[str]) -> list[str]:
    """``llamacpp_noise.py``'s output *earlier* with the point lines of *new* in place of
    its own for the same points (the others kept, in *earlier*'s order), and the ``all``
    line summed again over them."""
    mine = {line.split()[0]: line for line in new[1:] if "/" in line.split()[0]}
    body = [mine.get(line.split()[0], line) for line in earlier[1:] if "/" in line.split()[0]]
    missing = set(mine) - {line.split()[0] for line in body}
    if missing:
        raise SystemExit(f"--keep: the earlier set has no line for {sorted(missing)[0]}")
    total: dict[str, list[int]] = {}
    for line in body:
        for t, *figures in SEGMENT.findall(line):
            total[t] = [a + int(b) for a, b in zip(total.get(t, [0] * 4), figures, strict=True)]
    every = [f"T{t} {a} -> {b} (band {c}) of {n}" for t, (a, b, c, n) in sorted(total.items())]
    return [earlier[0], *body, "all            " + "   ".join(every)]


def build(points: list[str], keep: dict[str, Any] | None) -> dict[str, Any]:
    """The kept set for *points* (run here), merged with *keep* for the others."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in RATIOS:
            _script("llamacpp_at_speed.py", "--ratio", r, "--only", *points,
                    "--json", f"{tmp}/{r}.json")  # fmt: skip
            new = json.loads(Path(f"{tmp}/{r}.json").read_text())
            if keep is not None:
                if r not in keep:
                    why = "(it came before it); take every point here, without --keep"
                    raise SystemExit(f"--keep: the earlier set has no ratio {r!r} {why}")
                folders = [f"validation-llamacpp/{point_folder(p, OUT).name}/" for p in points]
                others = {k: v for k, v in keep[r]["points"].items() if k not in points}
                new["points"] = {k: new["points"].get(k, others.get(k))
                                 for k in [*keep[r]["points"], *new["points"]]}  # fmt: skip
                kept = [c for c in keep[r]["commands"] if not any(f in c for f in folders)]
                new["commands"] = kept + new["commands"]
            out[r] = new
    printed = {f: _script("llamacpp_noise.py", *points, *f.split()).splitlines() for f in BANDS}
    if keep is None:
        out["noise_printed"] = {"command": "PYTHONPATH=src python validation/llamacpp_noise.py "
                                "FLAGS (9 draws)", "by_flags": printed}  # fmt: skip
        return out
    out["noise_printed"] = {
        "command": keep["noise_printed"]["command"],
        "by_flags": {
            f: merged_bands(keep["noise_printed"]["by_flags"][f], printed[f]) for f in BANDS
        },
        "new_points_printed": printed,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, metavar="FILE.json")
    parser.add_argument("--only", nargs="+", metavar="CFG/REGIME", default=None)
    parser.add_argument("--keep", type=Path, default=None, metavar="EARLIER.json",
                        help="an earlier kept set: the points not taken come from it")  # fmt: skip
    parser.add_argument("--about", default="", help="what the set is, kept as its 'about'")
    args = parser.parse_args(argv)
    results = json.loads((OUT / "matrix.json").read_text())["results"]
    points = args.only or [k for k in results if runs_here(OUT, k)]
    keep = json.loads(args.keep.read_text()) if args.keep else None
    built = build(points, keep)
    about = args.about or (
        f"validation/llamacpp_at_speed_set.py --only {' '.join(points)}"
        + (f" --keep {args.keep.name}" if args.keep else "")
    )
    args.out.write_text(json.dumps({"about": about, **built}, indent=1) + "\n")
    print(f"wrote {args.out}: {len(points)} points run here"
          + (f", the others from {args.keep.name}" if args.keep else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
