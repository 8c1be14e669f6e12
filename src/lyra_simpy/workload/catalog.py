"""The request traces known by name: where each lives, and fetching the large ones.

A scenario's trace ``path:`` is a file (relative to the scenario's folder unless
absolute) or the name of a known trace (``lyra-simpy traces list``; the catalog is
``data/traces.yaml`` in the package). A name is looked up, in this order:

1. ``$LYRA_TRACES_DIR/<file>``, when that variable is set (a folder of your own copies);
2. the package's own ``data/traces/<file>``: the four small public traces (Azure LLM
   inference 2023 code and conversation, Mooncake conversation and synthetic) travel
   with the package, byte-identical to their sources, with their licences and citations
   (``data/traces/README.md``), so a clone from anywhere runs every scenario;
3. the cache, ``$LYRA_CACHE/traces/<file>`` (default ``~/.cache/lyra-simpy``), where
   ``lyra-simpy traces fetch NAME`` puts the larger traces (BurstGPT, the Azure 2024
   week), checked against the catalog's SHA-256.

A name found nowhere is one line saying how to fetch it. A user's own trace is always a
plain path.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lyra_simpy.errors import TraceError
from lyra_simpy.paths import cache_dir

PACKAGE_TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"
"""The folder of the vendored traces inside the package."""
CATALOG = PACKAGE_TRACES.parent / "traces.yaml"


@dataclass(frozen=True)
class KnownTrace:
    """One entry of the catalog (``data/traces.yaml``)."""

    name: str
    file: str
    format: str
    vendored: bool
    size: int | None
    """Bytes, when the source publishes it (None: unknown until fetched)."""
    sha256: str | None
    """The file's SHA-256 (None: the source publishes no checksum)."""
    licence: str
    source: str
    url: str
    cite: str
    about: str


@functools.cache
def known_traces() -> dict[str, KnownTrace]:
    """Name → entry, in the catalog's order."""
    from lyra_simpy.files import package_yaml

    raw = package_yaml(CATALOG.read_text())
    return {entry["name"]: KnownTrace(**entry) for entry in raw["traces"]}


def traces_dir() -> Path:
    """Where fetched traces go: ``$LYRA_CACHE/traces`` (default ``~/.cache/lyra-simpy``)."""
    return cache_dir() / "traces"


def candidates(entry: KnownTrace) -> list[Path]:
    """Where *entry* may be, in lookup order (see the module docstring)."""
    out = []
    mine = os.environ.get("LYRA_TRACES_DIR")
    if mine:
        out.append(Path(mine).expanduser() / entry.file)
    if entry.vendored:
        out.append(PACKAGE_TRACES / entry.file)
    out.append(traces_dir() / entry.file)
    return out


def locate(entry: KnownTrace) -> Path | None:
    """The first place *entry* is found, or None."""
    return next((p for p in candidates(entry) if p.is_file()), None)


def resolve_path(path: str, base_dir: Path) -> Path:
    """The file a scenario's ``path:`` names: a file relative to *base_dir* (or
    absolute), or a known trace's name. A name not found raises a one-line
    :class:`TraceError` saying how to get it; a missing plain file is left to the reader
    (which names the file)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    entry = known_traces().get(path)
    if entry is None or (base_dir / p).exists():
        return base_dir / p
    found = locate(entry)
    if found is None:
        raise TraceError(
            f"trace {path!r} is not here: run `lyra-simpy traces fetch {path}` "
            f"(or download {entry.url} to {traces_dir() / entry.file})"
        )
    return found


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(
    entry: KnownTrace,
    url: str | None = None,
    progress: bool | None = None,
    log: IO[str] | None = None,
    timeout_s: float = 60.0,
) -> Path:
    """Download *entry* into the cache (from *url*, default the catalog's) and check its
    SHA-256; return where it is. A trace already present is not downloaded again.
    Nothing half-downloaded is left under the trace's name: the download goes to a
    temporary file that is renamed once checked. *progress*: a tqdm bar (None: when
    stderr is a terminal)."""
    import sys

    found = locate(entry)
    if found is not None:
        return found
    import httpx

    out = traces_dir() / entry.file
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
    source = url or entry.url
    by_hand = f"download {source} by hand and put it at {out}"
    if progress is None:
        progress = sys.stderr.isatty()
    try:
        with httpx.stream("GET", source, follow_redirects=True, timeout=timeout_s) as response:
            if response.status_code != 200:
                raise TraceError(
                    f"traces fetch {entry.name}: {source} answered HTTP "
                    f"{response.status_code}; {by_hand}"
                )
            total = entry.size or int(response.headers.get("content-length") or 0) or None
            digest = hashlib.sha256()
            bar = _bar(total, entry.name, progress)
            with tmp.open("wb") as fh:
                for chunk in response.iter_bytes(1 << 20):
                    fh.write(chunk)
                    digest.update(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
            if bar is not None:
                bar.close()
    except httpx.HTTPError as exc:
        tmp.unlink(missing_ok=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceError(
            f"traces fetch {entry.name}: cannot reach {source} ({reason}); {by_hand}"
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    got = digest.hexdigest()
    if entry.sha256 is not None and got != entry.sha256:
        tmp.unlink(missing_ok=True)
        raise TraceError(
            f"traces fetch {entry.name}: sha256 of the download is {got}, must be "
            f"{entry.sha256} (a changed or damaged file; nothing was kept)"
        )
    tmp.replace(out)
    if entry.sha256 is None and log is not None:
        log.write(
            f"{entry.name}: the source publishes no checksum; sha256 of what was fetched: {got}\n"
        )
    return out


def _bar(total: int | None, name: str, on: bool) -> Any:
    if not on:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB"


def format_list() -> str:
    """The ``traces list`` table: name, format, size, licence, where it is; then the
    source, URL and SHA-256 of each."""
    rows = []
    for entry in known_traces().values():
        found = locate(entry)
        if found is None:
            where = "not fetched"
        elif found.parent == PACKAGE_TRACES:
            where = "in the package"
        else:
            where = str(found)
        rows.append((entry.name, entry.format, _size(entry.size), entry.licence, where))
    head = ("name", "format", "size", "licence", "where")
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]
    lines.append("")
    for entry in known_traces().values():
        lines.append(f"{entry.name}: {entry.about}")
        lines.append(f"  source {entry.source}")
        lines.append(f"  url    {entry.url}")
        lines.append(f"  sha256 {entry.sha256 or 'not published by the source'}")
        lines.append(f"  cite   {entry.cite}")
    return "\n".join(lines)
