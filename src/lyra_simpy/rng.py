"""One seeded generator tree per run (STYLE §6).

``seed`` → ``numpy.random.SeedSequence`` → one child ``Generator`` per named consumer.
Each consumer's stream is derived from its *name*, not from the order of creation, so
adding a consumer (a new policy that draws numbers) never shifts another's draws.
Streams in use: ``arrivals``, ``input_tokens``, ``output_tokens``, ``trace_rows``,
``prefixes`` (shared system prompts), ``router`` (random routers), ``speculative<i>``
(draft acceptance on replica *i*) and ``jitter<i>.<session>`` (step-time noise on
replica *i* in replay session *session*, :mod:`lyra_simpy.cost.jitter`).
"""

from __future__ import annotations

import zlib

import numpy as np


class Streams:
    """Named, independent random generators derived from one *seed*."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._cache: dict[str, np.random.Generator] = {}

    def get(self, name: str) -> np.random.Generator:
        """The generator for consumer *name* (the same object on every call)."""
        gen = self._cache.get(name)
        if gen is None:
            key = zlib.crc32(name.encode())
            gen = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, key])))
            self._cache[name] = gen
        return gen
