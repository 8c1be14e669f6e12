"""Execute every notebook here in quick mode, as ``tox`` and ``tox -e notebooks`` do:
``LYRA_QUICK=1 pytest --nbmake notebooks``, from the repository root or from here.

Extra arguments go to pytest (e.g. ``python notebooks/run_quick.py -k quickstart``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    os.environ["LYRA_QUICK"] = "1"  # each notebook runs its scenarios' `quick:` sizes
    # the notebooks' own pytest options, not the test suite's (pyproject.toml's addopts
    # and testpaths are for tests/)
    options = ["-p", "no:cacheprovider", "-o", "addopts=", "-o", f"testpaths={HERE}"]
    return int(pytest.main(["--nbmake", str(HERE), *options, *argv]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
