"""One figure style and a deterministic save, for every figure the package draws.

Readable in a two-column paper: ``WIDTH_IN`` × ``HEIGHT_IN`` panels (one column), 8-pt
text in a font matplotlib ships (so the output does not depend on the fonts installed),
units on the axes, no top/right spines, no titles inside the plot unless asked (the
caption lives in figures/README.md). :func:`save` writes files whose bytes depend only
on the figure: no dates, no software version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

WIDTH_IN = 3.3
"""Width of a one-column figure in a two-column paper (inches)."""
HEIGHT_IN = 2.3
"""Height of one panel (inches)."""

STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.4,
    "legend.frameon": False,
    "savefig.dpi": 200,
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the paper's PDF
    "svg.hashsalt": "lyra-simpy",  # fixed element ids: identical SVG files
}

#: Per-format metadata that would put a date or a software version into the file.
_NO_STAMPS: dict[str, dict[str, None]] = {
    ".png": {"Software": None},
    ".pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    ".svg": {"Creator": None, "Date": None},
}


def save(fig: Figure, *paths: Any) -> None:
    """Save *fig* to every path (format from the suffix; PNG into a file object) without
    time stamps or software versions, so reruns give identical bytes; then close it. The
    style applies here too: resolution, font embedding and SVG ids are read when the file
    is written."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        for path in paths:
            # a file object (no suffix) gets matplotlib's default format, PNG
            suffix = Path(path).suffix.lower() if isinstance(path, (str, Path)) else ".png"
            fig.savefig(path, metadata=_NO_STAMPS.get(suffix))
    plt.close(fig)
