"""The order in which a scheduler considers waiting requests (its queue policy).

``fcfs`` (the default of vLLM and SGLang): the engine's queue as it stands — arrival
order, with requests preempted by recompute put back at the *front* (vLLM's
``FCFSRequestQueue.prepend_request``). Nothing is sorted: FCFS costs nothing.

``shortest_prompt_first``: waiting requests by prompt length (``input_tokens``), ties
broken by arrival time and then by position in the workload, so the order is total and
deterministic. This is vLLM's ``--scheduling-policy priority`` with each request's
priority set to its prompt length (``vllm/v1/core/sched/request_queue.py``,
``PriorityRequestQueue``: a heap on ``(priority, arrival_time)``), and close to the
``sjf`` policy in vLLM's tree at commit 0097c7e (``SJFRequestQueue``: a score of the
prompt length and the time waited, so long prompts age forward). SGLang's
``--schedule-policy`` sorts its waiting queue each step in the same way but offers no
prompt-length key among its cache-agnostic policies (``fcfs``, ``lof`` = longest
output first, ``random``; ``python/sglang/srt/managers/schedule_policy.py``).

Preempted requests under ``shortest_prompt_first`` keep their own key: they do *not*
jump the queue, as vLLM's priority queue re-inserts a preempted request by its
``(priority, arrival_time)`` ("there is no concept of prepending to the front").
The key is the prompt length, not the tokens a recompute must redo (prompt plus the
tokens generated before the preemption): a client-set priority does not change when
the engine preempts.

Only the waiting queue is ordered: the victim of a preemption is still the newest
running request, whereas vLLM in priority mode preempts the running request with the
largest ``(priority, arrival_time)`` — with priority = prompt length, the longest
prompt (``Scheduler._pick_lowest_priority_running``). Not modelled yet.

The order only chooses whom a scheduler considers first; admission still stops at the
first request that does not fit (head-of-line within the chosen order), and the engine
removes admitted requests from wherever they stand in its queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from lyra_simpy.engine.request import Request

QueuePolicy = Literal["fcfs", "shortest_prompt_first"]
"""Names allowed for a scheduler's ``queue_policy`` field."""


def _prompt_key(req: Request) -> tuple[int, float, int]:
    return (req.input_tokens, req.arrival_s, req.index)


def ordered(waiting: Sequence[Request], policy: QueuePolicy) -> Sequence[Request]:
    """The waiting requests in the order *policy* considers them (front first).

    ``fcfs`` returns *waiting* itself (no copy, no sort)."""
    if policy == "fcfs":
        return waiting
    return sorted(waiting, key=_prompt_key)
