"""Where a replica's requests come from.

An open-loop source knows every arrival time in advance (Poisson, gamma, constant,
trace): the replica takes the due ones at each scheduling point and sleeps until the
next when idle, so an arrival costs no SimPy event of its own. A closed-loop source
keeps ``concurrency`` requests in flight (how "4-way / 8-way concurrent" benchmarks and
vLLM's ``--max-concurrency`` run): each end (finish or rejection) schedules the next
request ``think_time_s`` later.
"""

from __future__ import annotations

import heapq
from typing import Protocol

import numpy as np
import numpy.typing as npt

from lyra_simpy.request import Request


class Source(Protocol):
    """Requests for one replica, pulled by time."""

    done: bool
    """True once no further request will ever arrive."""
    feedback: bool
    """Whether an end (``on_finish``) can make a new request arrive."""
    arrival_s: npt.NDArray[np.float64]
    """Arrival time of every request (NaN for closed-loop requests not sent yet)."""
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]

    def pop_until(self, now_s: float) -> list[Request]:
        """Requests that have arrived by *now_s* and were not taken yet, in order."""
        ...

    def next_s(self) -> float | None:
        """Time of the next known arrival (None: none known yet)."""
        ...

    def on_finish(self, now_s: float) -> None:
        """A request of this source ended (finished or rejected) at *now_s*."""
        ...


class OpenLoopSource:
    """Arrivals at fixed times *arrival_s* (sorted), with the given lengths."""

    def __init__(
        self,
        arrival_s: npt.NDArray[np.float64],
        input_tokens: npt.NDArray[np.int64],
        output_tokens: npt.NDArray[np.int64],
        keys: list[tuple[int, ...]] | None = None,
    ) -> None:
        self.arrival_s = arrival_s
        self.keys = keys
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self._times: list[float] = arrival_s.tolist()
        self._inputs: list[int] = input_tokens.tolist()
        self._outputs: list[int] = output_tokens.tolist()
        self._next = 0
        self.done = len(self._times) == 0
        self.feedback = False

    def pop_until(self, now_s: float) -> list[Request]:
        i, times = self._next, self._times
        if i >= len(times) or times[i] > now_s:
            return []
        out = []
        keys = self.keys
        while i < len(times) and times[i] <= now_s:
            req = Request(i, i, times[i], self._inputs[i], self._outputs[i])
            if keys is not None:
                req.keys = keys[i]
            out.append(req)
            i += 1
        self._next = i
        self.done = i >= len(times)
        return out

    def next_s(self) -> float | None:
        i = self._next
        return self._times[i] if i < len(self._times) else None

    def peek_s(self, k: int) -> float | None:
        """Time of the arrival *k* after the next one (the last one known if fewer)."""
        times = self._times
        if self._next >= len(times):
            return None
        return times[min(self._next + k, len(times) - 1)]

    def on_finish(self, now_s: float) -> None:
        return None


class ClosedLoopSource:
    """*concurrency* clients, each sending its next request *think_time_s* after the
    previous one ended, until *limit* requests were sent or *stop_s* is reached."""

    def __init__(
        self,
        concurrency: int,
        think_time_s: float,
        input_tokens: npt.NDArray[np.int64],
        output_tokens: npt.NDArray[np.int64],
        stop_s: float | None = None,
        keys: list[tuple[int, ...]] | None = None,
    ) -> None:
        self.limit = len(input_tokens)
        self.keys = keys
        self.arrival_s = np.full(self.limit, np.nan)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self._inputs: list[int] = input_tokens.tolist()
        self._outputs: list[int] = output_tokens.tolist()
        self.think_time_s = think_time_s
        self.stop_s = stop_s
        self._heap: list[float] = [0.0] * min(concurrency, self.limit)
        self._scheduled = len(self._heap)
        self._issued = 0
        self.done = self.limit == 0
        self.feedback = True

    def pop_until(self, now_s: float) -> list[Request]:
        heap = self._heap
        out = []
        while heap and heap[0] <= now_s:
            t = heapq.heappop(heap)
            i = self._issued
            self.arrival_s[i] = t
            req = Request(i, i, t, self._inputs[i], self._outputs[i])
            if self.keys is not None:
                req.keys = self.keys[i]
            out.append(req)
            self._issued += 1
        self.done = not heap and self._scheduled >= self.limit
        return out

    def next_s(self) -> float | None:
        return self._heap[0] if self._heap else None

    def on_finish(self, now_s: float) -> None:
        t = now_s + self.think_time_s
        if self._scheduled < self.limit and (self.stop_s is None or t < self.stop_s):
            heapq.heappush(self._heap, t)
            self._scheduled += 1
        else:
            self._scheduled = self.limit  # ends come in time order: no client sends again
        self.done = not self._heap and self._scheduled >= self.limit
