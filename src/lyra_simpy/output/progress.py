"""Progress of ``lyra-simpy run`` on stderr: variants done, simulated time within one.

Shown only when stderr is a terminal and ``CI`` is not set (silent when piped, in CI and
in tests), and only once the work has lasted :data:`DELAY_S` (tqdm's ``delay``): a
scenario that ends sooner prints nothing.

Within a variant the simulated clock is read by a daemon thread every
:data:`POLL_S` of wall time (``env.now`` is a float: reading it from another thread is
safe under the GIL). Nothing is added to the simulation: no SimPy event, no per-
iteration callback, so results and speed are those of a run without progress (event
order, fused spans and the final clock are untouched).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TextIO

import simpy

DELAY_S = 1.0
"""Seconds of wall time before a bar appears."""
POLL_S = 0.25
"""Seconds of wall time between two reads of the simulated clock."""


def wanted(stream: TextIO | None = None) -> bool:
    """Whether to show progress on *stream* (default stderr): a terminal, not CI."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty()) and not os.environ.get("CI")


class RunProgress:
    """Bars for one scenario of *total* variants named *name* (disabled: no output)."""

    def __init__(self, name: str, total: int, enabled: bool, stream: TextIO | None = None):
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.variants: Any = None
        if enabled:  # disabled, tqdm is not even imported (start-up of `lyra-simpy run`)
            from tqdm import tqdm

            self._tqdm = tqdm
            self.variants = tqdm(
                total=total, desc=name, unit="run", file=self.stream, delay=DELAY_S,
                position=0, leave=False,
            )  # fmt: skip

    def watch(self, label: str, until_s: float | None) -> Callable[
        [simpy.Environment], AbstractContextManager[None]
    ]:  # fmt: skip
        """The ``watch`` hook of :func:`~lyra_simpy.simulation.simulate` for variant
        *label*: a bar of simulated seconds (out of *until_s* when the run has a stop)."""

        @contextmanager
        def hook(env: simpy.Environment) -> Iterator[None]:
            if not self.enabled:
                yield
                return
            bar = self._tqdm(
                total=until_s, desc=f"  {label}", unit="sim s", file=self.stream,
                delay=DELAY_S, position=1, leave=False, mininterval=POLL_S,
                bar_format=None if until_s else "{desc}: {n:.1f} sim s [{elapsed}, {rate_fmt}]",
            )  # fmt: skip
            stop = threading.Event()
            started = time.monotonic()

            def poll() -> None:
                while not stop.wait(POLL_S):
                    bar.update(float(env.now) - bar.n)

            thread = threading.Thread(target=poll, name="lyra-progress", daemon=True)
            thread.start()
            try:
                yield
            finally:
                stop.set()
                thread.join()
                if time.monotonic() - started >= DELAY_S:  # shown: end on the final clock
                    bar.update(float(env.now) - bar.n)
                    bar.refresh()
                bar.close()

        return hook

    def done(self) -> None:
        """One variant finished."""
        if self.variants is not None:
            self.variants.update(1)

    def close(self) -> None:
        if self.variants is not None:
            self.variants.close()

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
