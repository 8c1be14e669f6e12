"""Where a replica's requests come from.

An open-loop source knows every arrival time in advance (Poisson, gamma, constant,
trace): the replica takes the due ones at each scheduling point and sleeps until the
next when idle, so an arrival costs no SimPy event of its own. A closed-loop source
keeps ``concurrency`` requests in flight (how "4-way / 8-way concurrent" benchmarks and
vLLM's ``--max-concurrency`` run): each end (finish or rejection) schedules the next
request ``think_time_s`` later.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from lyra_simpy.engine.request import Request
from lyra_simpy.workload.rate import Warp

if TYPE_CHECKING:
    import simpy

Ints = npt.NDArray[np.int64]
Keys = list[tuple[int, ...]]

CHUNK = 1 << 16
"""Requests whose lengths (and prefix keys) are drawn per call. A workload is drawn in
chunks of at most this many, each continuing every stream where the one before stopped,
so a run that ``until_s`` or ``duration_s`` ends early holds only the chunks it reached
(a closed loop of ``num_requests: 300000000`` stopped at 0.5 s draws one). A workload
of at most this many requests is one draw, value for value what it was before chunks;
above it, fixed, normal, log-normal lengths and conversation and trace prefixes are
still the same values (they draw element by element, or not at all), while uniform
lengths, mixtures and system prompts are drawn per chunk (a chunk is a new call)."""


class Drawn:
    """The workload's per-request columns (prompt and output tokens, prefix keys),
    drawn chunk by chunk as far as :meth:`ensure` asks, never past *total*.

    *draw* ``(start, size)`` draws requests ``start … start + size − 1``."""

    def __init__(
        self, total: int, draw: Callable[[int, int], tuple[Ints, Ints, Keys | None]]
    ) -> None:
        self.total = total
        self._draw = draw
        self.input_tokens: Ints = np.zeros(0, dtype=np.int64)
        self.output_tokens: Ints = np.zeros(0, dtype=np.int64)
        self.keys: Keys | None = None

    @property
    def count(self) -> int:
        """Requests drawn so far."""
        return len(self.input_tokens)

    def ensure(self, k: int) -> None:
        """Draw whole chunks until the first *k* requests (at most *total*) are drawn."""
        k = min(k, self.total)
        if self.count >= k:
            return
        start = self.count
        inputs: list[Ints] = [self.input_tokens] if start else []
        outputs: list[Ints] = [self.output_tokens] if start else []
        while start < k:
            size = min(CHUNK, self.total - start)
            inp, out, keys = self._draw(start, size)
            inputs.append(inp)
            outputs.append(out)
            if keys is not None:
                if self.keys is None:
                    self.keys = keys
                else:
                    self.keys.extend(keys)
            start += size
        self.input_tokens = inputs[0] if len(inputs) == 1 else np.concatenate(inputs)
        self.output_tokens = outputs[0] if len(outputs) == 1 else np.concatenate(outputs)


class Feed(Protocol):
    """Requests for one replica, pulled by time: what the engine reads."""

    @property
    def done(self) -> bool:
        """True once no further request will ever arrive."""
        ...

    feedback: bool
    """Whether an end (``on_finish``) can make a new request arrive."""

    def pop_until(self, now_s: float) -> list[Request]:
        """Requests that have arrived by *now_s* and were not taken yet, in order."""
        ...

    def next_s(self) -> float | None:
        """Time of the next known arrival (None: none known yet)."""
        ...

    def on_finish(self, now_s: float) -> None:
        """A request of this source ended (finished or rejected) at *now_s*."""
        ...

    def arrivals_pending(self) -> bool:
        """Whether a further request may still arrive (what a static batch waits for)."""
        ...


class Source(Feed, Protocol):
    """The workload's requests, drawn (:func:`~lyra_simpy.workload.build_source`): a
    feed that also holds every drawn request's lengths, for the results."""

    arrival_s: npt.NDArray[np.float64]
    """Arrival time of every request (NaN for closed-loop requests not sent yet)."""
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    keys: Keys | None
    """Each drawn request's prefix keys (None: prompts share nothing)."""

    def peek_s(self, k: int) -> float | None:
        """Time of the arrival *k* after the next one, as far as known (the next one's
        when nothing further is known; None: none known)."""
        ...

    def on_grow(self, listener: Callable[[int], None]) -> None:
        """Call *listener* with the new number of requests whenever more are drawn
        (a closed loop draws as it goes; an open-loop source never grows)."""
        ...

    def arrivals_before(self, t: float) -> int:
        """Known requests not yet taken that reach the engine before *t*
        (``workload.request_path_cpu_share`` charges them to the iteration under way)."""
        ...


@runtime_checkable
class RoutedFeed(Feed, Protocol):
    """A source whose requests a cluster sends (a router, or the hand-off queue of a
    disaggregated cluster): the replica cannot know its next arrival, so when idle it
    waits for an event instead of a time."""

    def arrival_event(self) -> simpy.Event | None:
        """Triggered when a request is sent here, the workload ends or KV frees
        elsewhere (None: a request is already due)."""
        ...

    def carry_horizon_s(self) -> float | None:
        """How far a fused run carried across the cluster's arrivals is planned."""
        ...

    def push(self, req: Request) -> None:
        """A request sent here now."""
        ...

    def wake(self) -> None:
        """Wake the replica waiting on :meth:`arrival_event`."""
        ...


class OpenLoopSource:
    """Requests sent at fixed times *arrival_s* (sorted), with the given lengths; the
    engine takes each in *path_s* later (``workload.request_path_ms``)."""

    def __init__(
        self,
        arrival_s: npt.NDArray[np.float64],
        input_tokens: npt.NDArray[np.int64],
        output_tokens: npt.NDArray[np.int64],
        keys: list[tuple[int, ...]] | None = None,
        path_s: float = 0.0,
    ) -> None:
        self.arrival_s = arrival_s
        """When each request was sent (the records' ``arrival_s``)."""
        self.keys = keys
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.path_s = path_s
        self._times: list[float] = (arrival_s + path_s if path_s else arrival_s).tolist()
        """When the engine takes each in (what ``pop_until`` and ``next_s`` go by)."""
        self._inputs: list[int] = input_tokens.tolist()
        self._outputs: list[int] = output_tokens.tolist()
        self._next = 0
        self.done = len(self._times) == 0
        self.feedback = False
        self.warp: Warp | None = None
        """The rate schedule's time warp the times went through (None: none)."""

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

    def arrivals_before(self, t: float) -> int:
        return bisect.bisect_left(self._times, t, self._next) - self._next

    def scale_from(self, now_s: float, factor: float) -> None:
        """From *now_s* on, arrivals come at *factor* × the workload's own rate: the
        sends still to come move through the warp that holds *factor* after *now_s*
        (:meth:`~lyra_simpy.workload.rate.Warp.hold_from`; none moves before now). A
        request already sent but still on its request path keeps its time."""
        warp = self.warp if self.warp is not None else Warp.identity()
        changed = warp.hold_from(now_s, factor)
        i = self._next
        if self.path_s:  # sent by now, not yet at the engine: not the client's to move
            i += int(np.searchsorted(self.arrival_s[i:], now_s, side="right"))
        future = self.arrival_s[i:]
        if len(future):
            sent = np.maximum(changed.inverse(warp.cumulative_many(future)), now_s)
            self.arrival_s[i:] = sent
            self._times[i:] = (sent + self.path_s if self.path_s else sent).tolist()
        self.warp = changed

    def on_finish(self, now_s: float) -> None:
        return None

    def on_grow(self, listener: Callable[[int], None]) -> None:
        return None

    def arrivals_pending(self) -> bool:
        return self._next < len(self._times)


class ClosedLoopSource:
    """*concurrency* clients, each sending its next request *think_time_s* after the
    previous one ended, until ``requests.total`` requests were sent or *stop_s* is
    reached; the engine takes each in *path_s* after its send
    (``workload.request_path_ms``). The requests are drawn a chunk at a time as the
    clients reach them."""

    def __init__(
        self,
        concurrency: int,
        think_time_s: float,
        requests: Drawn,
        stop_s: float | None = None,
        path_s: float = 0.0,
    ) -> None:
        self.limit = requests.total
        self._requests = requests
        requests.ensure(1)
        self.arrival_s = np.full(requests.count, np.nan)
        self.input_tokens = requests.input_tokens
        self.output_tokens = requests.output_tokens
        self.keys = requests.keys
        self._inputs: list[int] = self.input_tokens.tolist()
        self._outputs: list[int] = self.output_tokens.tolist()
        self._listeners: list[Callable[[int], None]] = []
        self.think_time_s = think_time_s
        self.stop_s = stop_s
        self.path_s = path_s
        self._heap: list[float] = [path_s] * min(concurrency, self.limit)
        """When the engine takes in each client's next request (its send + *path_s*)."""
        self._scheduled = len(self._heap)
        self._issued = 0
        self.done = self.limit == 0
        self.feedback = True

    def on_grow(self, listener: Callable[[int], None]) -> None:
        self._listeners.append(listener)

    def peek_s(self, k: int) -> float | None:
        return self.next_s()  # a client's next send is known only once it is scheduled

    def draw_all(self) -> None:
        """Draw every request now (what a replay that sends them all needs)."""
        self._grow(self.limit)

    def _grow(self, upto: int | None = None) -> None:
        drawn = self._requests
        had = drawn.count
        drawn.ensure(had + 1 if upto is None else upto)
        if drawn.count == had:
            return
        self.arrival_s = np.concatenate((self.arrival_s, np.full(drawn.count - had, np.nan)))
        self.input_tokens = drawn.input_tokens
        self.output_tokens = drawn.output_tokens
        self.keys = drawn.keys
        self._inputs += drawn.input_tokens[had:].tolist()
        self._outputs += drawn.output_tokens[had:].tolist()
        for listener in self._listeners:
            listener(drawn.count)

    def pop_until(self, now_s: float) -> list[Request]:
        heap = self._heap
        out = []
        while heap and heap[0] <= now_s:
            t = heapq.heappop(heap)
            i = self._issued
            if i >= len(self._inputs):
                self._grow()
            self.arrival_s[i] = t - self.path_s if self.path_s else t
            req = Request(i, i, t, self._inputs[i], self._outputs[i])
            if self.keys is not None:
                req.keys = self.keys[i]
            out.append(req)
            self._issued += 1
        self.done = not heap and self._scheduled >= self.limit
        return out

    def next_s(self) -> float | None:
        return self._heap[0] if self._heap else None

    def arrivals_before(self, t: float) -> int:
        return sum(1 for x in self._heap if x < t)

    def arrivals_pending(self) -> bool:
        return bool(self._heap)

    def on_finish(self, now_s: float) -> None:
        t = now_s + self.think_time_s
        if self._scheduled < self.limit and (self.stop_s is None or t < self.stop_s):
            heapq.heappush(self._heap, t + self.path_s)
            self._scheduled += 1
        else:
            self._scheduled = self.limit  # ends come in time order: no client sends again
        self.done = not self._heap and self._scheduled >= self.limit
