"""Where sweep points run: in this process, on a local process pool, or on Dask.

Every executor runs the same pure function, :func:`simulate_summary`, on a validated
scenario and hands back plain data; nothing is written by a worker, so the caller keeps
the only copy of the results and a worker on another machine needs no shared disk (it
needs lyra-simpy installed, and any trace or profile file at the same path). A run
depends only on its scenario and seed, so every executor gives identical numbers.

- ``workers=1``: in this process, one point after another (no pickling; easy to debug).
- default: :class:`concurrent.futures.ProcessPoolExecutor` with *workers* processes
  (default ``os.cpu_count()``), started with ``spawn`` so nothing of this process's
  state (threads, open files) is copied into them.
- ``dask="local"``: a ``dask.distributed.LocalCluster`` of *workers* one-thread
  processes; ``dask="tcp://host:port"``: the scheduler at that address; or a
  ``dask.distributed.Client`` already connected.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from lyra_simpy.errors import LyraError
from lyra_simpy.scenario import Scenario
from lyra_simpy.simulation import simulate

T = TypeVar("T")


class Executor(Protocol):
    """Runs *fn* over *items*, yielding ``(index, result)`` as each one finishes."""

    def run(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[int, Any]]: ...


def simulate_summary(scenario: Scenario) -> dict[str, Any]:
    """Simulate *scenario*; its summary and engine counters (what a sweep keeps)."""
    res = simulate(scenario)
    return {"summary": res.summary, "engine": res.engine}


class InProcess:
    """One item after another, in this process."""

    def run(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[int, Any]]:
        for i, item in enumerate(items):
            yield i, fn(item)


ORPHAN_CHECK_S = 1.0
"""How often a pool worker checks that the process that started it is still alive."""


def _exit_with(parent_pid: int) -> None:
    """Pool worker initializer: end this worker once *parent_pid* is gone (``kill -9`` of
    a sweep would otherwise leave its workers blocked on the task queue for ever)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class LocalPool:
    """A process pool on this machine."""

    def __init__(self, workers: int) -> None:
        self.pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_exit_with,
            initargs=(os.getpid(),),
        )

    def run(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[int, Any]]:
        futures = {self.pool.submit(fn, item): i for i, item in enumerate(items)}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.cancel()


class DaskCluster:
    """Tasks on a Dask cluster through a ``distributed.Client``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[int, Any]]:
        # pure=False: a scenario is hashed here (the key), not by Dask's tokenizer
        futures = self.client.map(fn, items, pure=False)
        index = {fut.key: i for i, fut in enumerate(futures)}
        try:
            for fut in _distributed().as_completed(futures):
                yield index[fut.key], fut.result()
        finally:
            self.client.cancel(futures)


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise LyraError("--dask needs dask.distributed: pip install 'lyra-simpy[dask]'") from None
    return distributed


@contextmanager
def open_executor(workers: int | None = None, dask: Any = None) -> Iterator[Executor]:
    """The executor for *workers* and *dask* (see the module docstring), closed after."""
    if workers is not None and workers < 1:
        raise LyraError(f"--workers: got {workers}, must be >= 1")
    if dask is None:
        n = workers or os.cpu_count() or 1
        if n == 1:
            yield InProcess()
            return
        pool = LocalPool(n)
        try:
            yield pool
        finally:
            pool.pool.shutdown(cancel_futures=True)
        return
    if not isinstance(dask, str):
        yield DaskCluster(dask)
        return
    distributed = _distributed()
    if dask == "local":
        cluster = distributed.LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            # a worker's heartbeat racing the shutdown logs an error with a traceback;
            # a failed task still raises here, through its future
            silence_logs=logging.CRITICAL,
        )
        client = distributed.Client(cluster)
    elif dask.startswith(("tcp://", "tls://", "ucx://", "inproc://")):
        cluster = None
        try:
            client = distributed.Client(dask, timeout="30s")
        except OSError as exc:
            raise LyraError(f"--dask: cannot reach the scheduler at {dask} ({exc})") from None
    else:
        raise LyraError(f"--dask: got {dask!r}, must be 'local' or an address like tcp://HOST:PORT")
    try:
        yield DaskCluster(client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
