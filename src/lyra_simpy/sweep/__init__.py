"""Sweeps: one scenario over a grid of its fields and seeds, resumable, on any executor.

``load_sweep`` reads and validates a sweep file (:mod:`~lyra_simpy.sweep.spec`),
``run_sweep`` runs what is not done yet on a process pool or Dask
(:mod:`~lyra_simpy.sweep.executors`) and writes the tidy table
(:mod:`~lyra_simpy.sweep.run`), which ``load_table`` reads as a pandas DataFrame.
"""

from lyra_simpy.sweep.executors import open_executor, simulate_summary
from lyra_simpy.sweep.run import SweepReport, load_table, run_sweep
from lyra_simpy.sweep.spec import Point, Sweep, SweepSpec, load_sweep, point_key, sweep_from_dict

__all__ = [
    "Point",
    "Sweep",
    "SweepReport",
    "SweepSpec",
    "load_sweep",
    "load_table",
    "open_executor",
    "point_key",
    "run_sweep",
    "simulate_summary",
    "sweep_from_dict",
]
