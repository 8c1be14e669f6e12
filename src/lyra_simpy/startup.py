"""A command's start-up: loading NumPy, pydantic and the scenario schema, and validating
the user's files, as quickly as the interpreter allows.

Two things cost a ``lyra-simpy run`` of the 10 000-request benchmark about a tenth of
its whole time (``benchmarks/speed.py`` on this project's 2-core machine) and buy
nothing here:

* **OpenBLAS's thread pool.** NumPy's BLAS starts one thread per core when NumPy is
  imported (about 0.05 s of a 0.14–0.19 s ``import numpy`` on 2 cores). The simulator calls
  no BLAS routine — its sums are kept out of BLAS on purpose, so that results do not
  move with the thread count (``metrics.summary``, ``metrics.fairness``,
  ``calibration.fit``) — so the CLI imports NumPy with ``OPENBLAS_NUM_THREADS=1``
  unless the user set a thread count (``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS`` or
  ``OMP_NUM_THREADS``, which OpenBLAS reads in that order). The variable is set only
  for the import and removed after it: a process the command starts (a sweep worker, a
  live server) gets the environment it was given.
* **The cyclic garbage collector.** Importing the schema builds ~80 pydantic models and
  the classes around them, which live until the process exits; collecting while they
  are made walks them again and again for nothing (0.04–0.1 s). The collector is off
  during start-up, and afterwards everything made so far is moved out of its sight
  (:func:`gc.freeze`), so that the collections during the simulation do not walk it
  either.

Only the command line does this (:mod:`lyra_simpy.cli`): a program that imports
``lyra_simpy`` keeps its own settings.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
"""Where OpenBLAS reads its thread count; one set by the user is left as it is."""


def import_numpy_single_threaded() -> None:
    """Import NumPy with its BLAS on one thread (see the module docstring); nothing when
    NumPy is loaded already or the user chose a thread count."""
    if "numpy" in sys.modules or any(v in os.environ for v in THREAD_VARIABLES):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


@contextmanager
def start_up() -> Iterator[None]:
    """Run the block (imports, loading the scenario files) with the collector off and
    NumPy loaded single-threaded; afterwards freeze what it made and turn the collector
    back on (as it was)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        import_numpy_single_threaded()
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
