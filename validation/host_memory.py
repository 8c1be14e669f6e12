"""What this host charges a process for memory it touches for the first time, against
memory the process freed and takes again.

``python validation/host_memory.py [--mib 8192] [--chunk-mib 16] [--wait-s 30] [--json
OUT]`` allocates ``--mib`` in chunks of ``--chunk-mib`` (numpy, each chunk its own
mapping) and writes every page; frees them, takes and writes them again at once (the
allocator's freed memory); then frees them, waits ``--wait-s`` and does it once more.
It prints µs per 4 KiB page for each pass: the median chunk and the slowest decile.
The default is the size of llama-server's prompt cache (``--cache-ram 8192``); run it
with nothing else running.

Issue 12, item 65: llama-server's prompt-cache save copies a slot's state into a new
buffer (``server_prompt_cache::alloc``: a ``std::vector`` of the state's size, one
mapping each above glibc's mmap threshold), so its cost per token is the host's cost of
fresh pages times the state's pages per token. Once the cache is full it frees its
oldest states first and the new buffers reuse their memory; on item 64's host the
save's probe read ~0.10 ms a token while the cache filled and 0.012 once it evicted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PAGE = 4096


def no_huge_pages() -> None:
    """numpy asks the kernel for huge pages for large arrays (``madvise``); a
    ``std::vector`` does not: turn it off, so that each 4 KiB page faults as llama-server's
    would."""
    core = getattr(np, "_core", None) or np.core
    core.multiarray._set_madvise_hugepage(False)


def touch_pass(mib: int, chunk_mib: int) -> tuple[list[np.ndarray], list[float]]:
    """Allocate *mib* in chunks of *chunk_mib* and write each: the chunks and each
    chunk's µs per page."""
    n = chunk_mib << 20
    chunks, us = [], []
    for _ in range(mib // chunk_mib):
        t0 = time.perf_counter()
        a = np.empty(n, dtype=np.uint8)
        a.fill(1)
        us.append((time.perf_counter() - t0) * 1e6 / (n // PAGE))
        chunks.append(a)
    return chunks, us


def summary(us: list[float]) -> dict[str, float]:
    """A pass's median and slowest-decile µs per page."""
    return {"median_us_per_page": round(statistics.median(us), 2),
            "p90_us_per_page": round(float(np.percentile(us, 90)), 2)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=8192)
    ap.add_argument("--chunk-mib", type=int, default=16)
    ap.add_argument("--wait-s", type=float, default=30.0)
    ap.add_argument("--json", type=Path, default=None, metavar="OUT")
    args = ap.parse_args(argv)
    if args.chunk_mib < 1:
        ap.error(f"--chunk-mib: got {args.chunk_mib}, must be 1 or more")
    if args.mib < args.chunk_mib:
        ap.error(f"--mib: got {args.mib}, must be at least --chunk-mib ({args.chunk_mib})")
    if args.wait_s < 0:
        ap.error(f"--wait-s: got {args.wait_s:g}, must be 0 or more")
    no_huge_pages()
    got: dict[str, Any] = {}
    chunks, us = touch_pass(args.mib, args.chunk_mib)
    got["first_touch"] = summary(us)
    del chunks
    chunks, us = touch_pass(args.mib, args.chunk_mib)
    got["again_at_once"] = summary(us)
    del chunks
    time.sleep(args.wait_s)
    chunks, us = touch_pass(args.mib, args.chunk_mib)
    got[f"again_after_{args.wait_s:g}_s"] = summary(us)
    del chunks
    for name, s in got.items():
        print(f"{name:20s} {s['median_us_per_page']:6.2f} µs a page (slowest decile "
              f"{s['p90_us_per_page']:.2f})")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"argv": sys.argv[1:] if argv is None else argv,
                                         "mib": args.mib, "chunk_mib": args.chunk_mib,
                                         **got}, indent=1) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
