"""Where lyra-simpy keeps what it downloads or builds outside a results folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$LYRA_CACHE`` or ``~/.cache/lyra-simpy``: fetched traces, the llama.cpp build."""
    return Path(os.environ.get("LYRA_CACHE") or Path.home() / ".cache" / "lyra-simpy")
