"""``lyra-simpy explore [RESULTS_DIR]``: start the explorer on this machine only.

Streamlit serves the page on 127.0.0.1 (never on every interface), headless (no
browser is opened by the server; the address is printed), without usage statistics.
Streamlit is the ``[app]`` extra: without it the command fails with one line naming
the install command.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from lyra_simpy.errors import LyraError

APP = Path(__file__).resolve().parent / "app.py"
INSTALL = "pip install 'lyra-simpy[app]'"


def command(results_dir: Path, figures_dir: Path, port: int) -> list[str]:
    """The ``streamlit run`` command line (bound to 127.0.0.1)."""
    del results_dir, figures_dir  # passed through the environment (see :func:`environ`)
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip


def environ(results_dir: Path, figures_dir: Path) -> dict[str, str]:
    """The app's environment: where the results, figures and repository are."""
    return {
        **os.environ,
        "LYRA_EXPLORE_RESULTS": str(results_dir.resolve()),
        "LYRA_EXPLORE_FIGURES": str(figures_dir.resolve()),
        "LYRA_EXPLORE_REPO": str(Path.cwd()),
        "MPLBACKEND": "Agg",
    }


def explore(results_dir: Path, figures_dir: Path, port: int) -> int:
    """Replace this process with the Streamlit server (it serves until interrupted)."""
    if importlib.util.find_spec("streamlit") is None:
        raise LyraError(f"explore needs Streamlit, the [app] extra: {INSTALL}")
    if not results_dir.is_dir():
        raise LyraError(f"explore: {results_dir}: no such folder (run `tox -e scenarios` first)")
    print(f"lyra-simpy explore: http://127.0.0.1:{port} ({results_dir}); Ctrl-C stops it")
    sys.stdout.flush()
    # This process becomes the server: Ctrl-C and kill reach Streamlit itself, and no
    # orphaned server outlives a killed launcher.
    cmd = command(results_dir, figures_dir, port)
    os.execve(cmd[0], cmd, environ(results_dir, figures_dir))
    return 0  # not reached
