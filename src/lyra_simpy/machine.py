"""What machine a measurement ran on: the CPU model and the load average (Linux ``/proc``),
for the documents and benchmarks that report a measured figure beside its machine."""

from __future__ import annotations

from pathlib import Path


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo`` (None where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``avx2``, ``avx512f`` …; empty where
    there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def load_average() -> str:
    """The 1, 5 and 15-minute load averages as ``/proc/loadavg`` writes them
    (``unknown`` where there is none)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
