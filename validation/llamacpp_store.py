"""Keep a matrix point's real runs in the repository, and bring them back on another machine.

``validate_cpu.py --matrix`` leaves each point's profile, real runs, speed readings and
server log in ``results/validation-llamacpp/CFG_REGIME`` — a folder git ignores, which a
fresh clone does not have. ``matrix.json`` keeps only the tables, so without the folder
nothing can be simulated again (``--resimulate`` and ``--steps-check`` say so and stop),
and a change to the engine model can only be checked against the published runs on the
machine that ran them.

``python validation/llamacpp_store.py pack CFG/REGIME ...`` writes each point's inputs —
every file in its folder except what the simulator makes from them (``sim*/``,
``capacity/``, ``at_speed_*/``, ``*_compare.json``) — as
``docs/validation/points/CFG_REGIME.tar.xz`` with its SHA-256 and the point's finish time
(``matrix.json``'s ``finished``) in ``docs/validation/points/index.json``. A point
packed again replaces its archive: the store holds each point's published runs.

``python validation/llamacpp_store.py unpack [CFG/REGIME ...]`` (default: every one
stored) checks each archive's SHA-256 and that the published matrix holds the same run of
that point (the same ``finished``), then unpacks it into ``results/validation-llamacpp``
and puts the published ``matrix.json`` there if none is. A ``matrix.json`` there that
holds another run of the point (the point was run again on this machine) stops it in one
line, before anything is unpacked: ``--resimulate`` would pair that run's records with
these runs. A point folder already there is left as it is unless ``--force``. Then
``validate_cpu.py --matrix --resimulate --only CFG/REGIME`` and the other readers
(``llamacpp_at_speed.py``, ``llamacpp_noise.py``, ``llamacpp_lone_wait.py``) work from a
clone.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

from llamacpp_points import OUT, PUBLISHED, ROOT, point_folder, runs_here

STORE = ROOT / "docs" / "validation" / "points"
MADE = ("sim", "sim_t2", "sim_t3", "capacity")
"""A point's folders the simulator writes from its inputs (with ``at_speed_*``)."""


def derived(rel: Path) -> bool:
    """Whether *rel* (a path inside a point folder) is something the simulator makes."""
    top = rel.parts[0]
    return top in MADE or top.startswith("at_speed_") or rel.name.endswith("_compare.json")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _index() -> dict[str, Any]:
    index = STORE / "index.json"
    return json.loads(index.read_text()) if index.is_file() else {}


def _published() -> dict[str, Any]:
    results: dict[str, Any] = json.loads(PUBLISHED.read_text())["results"]
    return results


def pack(keys: list[str]) -> list[str]:
    """Archive each point of *keys* into the store; the lines to print."""
    results = _published()
    unknown = [k for k in keys if k not in results]
    if unknown:
        raise SystemExit(f"pack: {unknown[0]!r} is not a published point; points: {list(results)}")
    absent = [k for k in keys if not runs_here(OUT, k)]
    if absent:
        raise SystemExit(f"pack: no profile and real runs of {absent[0]!r} in {OUT}")
    STORE.mkdir(parents=True, exist_ok=True)
    index, lines = _index(), []
    for key in keys:
        folder = point_folder(key, OUT)
        name = folder.name
        files = sorted(p for p in folder.rglob("*") if p.is_file()
                       and not derived(p.relative_to(folder)))  # fmt: skip
        target = STORE / f"{name}.tar.xz"
        tmp = target.with_suffix(".part")
        with tarfile.open(tmp, "w:xz") as tar:
            for f in files:
                info = tar.gettarinfo(str(f), arcname=f"{name}/{f.relative_to(folder)}")
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with f.open("rb") as fh:
                    tar.addfile(info, fh)
        tmp.replace(target)
        index[key] = {"file": target.name, "sha256": sha256(target),
                      "finished": results[key]["finished"], "files": len(files)}  # fmt: skip
        lines.append(f"{key}: {len(files)} files -> {target.relative_to(ROOT)} "
                     f"({target.stat().st_size / 1e6:.2f} MB)")  # fmt: skip
    (STORE / "index.json").write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")
    return lines


def unpack(keys: list[str] | None, force: bool) -> list[str]:
    """Bring each stored point of *keys* (all without) into ``results``; the lines to print."""
    index, results = _index(), _published()
    keys = keys or list(index)
    missing = [k for k in keys if k not in index]
    if missing:
        raise SystemExit(f"unpack: no stored point {missing[0]!r}; stored: {list(index)}")
    for key in keys:  # every check before anything is written
        entry = index[key]
        got = sha256(STORE / entry["file"])
        if got != entry["sha256"]:
            raise SystemExit(f"unpack: {entry['file']}: SHA-256 {got}, the index says "
                             f"{entry['sha256']}")  # fmt: skip
        published = results.get(key, {}).get("finished")
        if published != entry["finished"]:
            raise SystemExit(f"unpack: {key}: the stored runs finished {entry['finished']}, "
                             f"the published matrix's {published}")  # fmt: skip
        here = OUT / "matrix.json"  # what --resimulate pairs the runs with
        if here.is_file():
            finished = json.loads(here.read_text())["results"].get(key, {}).get("finished")
            if finished != entry["finished"]:
                raise SystemExit(f"unpack: {here} holds {key} as run {finished}, the stored runs "
                                 f"finished {entry['finished']}; move it aside (unpack then "
                                 f"puts the published matrix there)")  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    if not (OUT / "matrix.json").is_file():
        shutil.copy(PUBLISHED, OUT / "matrix.json")
    lines = []
    for key in keys:
        folder = point_folder(key, OUT)
        if folder.exists() and not force:
            lines.append(f"{key}: {folder} is there; left as it is (--force replaces it)")
            continue
        shutil.rmtree(folder, ignore_errors=True)
        data = (STORE / index[key]["file"]).read_bytes()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(OUT, filter="data")
            else:  # pragma: no cover - older Pythons
                tar.extractall(OUT)
        lines.append(f"{key}: {index[key]['files']} files -> {folder}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    put = sub.add_parser("pack", help="archive points' runs into docs/validation/points")
    put.add_argument("points", nargs="+", metavar="CFG/REGIME")
    get = sub.add_parser("unpack", help="bring stored points into results/validation-llamacpp")
    get.add_argument("points", nargs="*", metavar="CFG/REGIME")
    get.add_argument("--force", action="store_true", help="replace a point folder that is there")
    args = parser.parse_args(argv)
    lines = pack(args.points) if args.what == "pack" else unpack(args.points, args.force)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
