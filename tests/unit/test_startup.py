"""The command line's start-up (``lyra_simpy.startup``): NumPy's BLAS on one thread
unless the user chose a count, the environment given back as it was, and the garbage
collector off while the schema loads, on again afterwards."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lyra_simpy.startup import start_up

SRC = Path(__file__).resolve().parents[2] / "src"

PROBE = """
import ctypes, glob, os, pathlib
from lyra_simpy.startup import import_numpy_single_threaded
import_numpy_single_threaded()
import numpy
libs = pathlib.Path(numpy.__file__).parent.parent / "numpy.libs"
found = sorted(glob.glob(str(libs / "libscipy_openblas*")))
threads = -1
if found:
    lib = ctypes.CDLL(found[0])
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads"):
        if hasattr(lib, name):
            threads = getattr(lib, name)()
print(threads, os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
"""


def _probe(**env: str) -> tuple[int, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    }
    clean["PYTHONPATH"] = str(SRC)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    threads, variable = out.stdout.split()
    return int(threads), variable


def test_numpy_is_imported_with_one_blas_thread_and_the_environment_given_back():
    threads, variable = _probe()
    if threads == -1:
        pytest.skip("this NumPy has no scipy-openblas library to ask")
    assert threads == 1
    assert variable == "unset"


def test_a_thread_count_the_user_chose_is_kept():
    threads, variable = _probe(OPENBLAS_NUM_THREADS="2")
    if threads == -1:
        pytest.skip("this NumPy has no scipy-openblas library to ask")
    assert (threads, variable) == (2, "2")


def test_the_collector_is_off_during_start_up_and_what_it_made_is_frozen():
    assert gc.isenabled()
    try:
        with start_up():
            assert not gc.isenabled()
            made = [[] for _ in range(10)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(made)
    finally:
        gc.unfreeze()
