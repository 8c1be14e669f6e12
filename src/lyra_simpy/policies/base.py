"""The scheduler protocol and the data it exchanges with the engine.

A scheduler is a plain class without SimPy (STYLE §3): each iteration the engine hands it
a read-only :class:`EngineView` and executes the :class:`BatchPlan` it returns. The plan
names which waiting requests start (and how many prompt tokens each computes), which
running requests decode, and which are preempted; or, when nothing should run yet (a
static batch still filling), until when to wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from lyra_simpy.engine.request import RejectReason, Request

if TYPE_CHECKING:
    from lyra_simpy.policies.prefix_cache import PrefixCache


class EngineView(NamedTuple):
    """What a scheduler may read of one replica at a scheduling point.

    A named tuple rather than a frozen dataclass: the engine makes one at every
    scheduling point, and a frozen dataclass's ``__init__`` (one ``object.__setattr__``
    per field) costs about four times as much to build; read-only either way."""

    now_s: float
    waiting: Sequence[Request]
    """Queue in order (front first); preempted requests re-enter at the front."""
    running: Sequence[Request]
    """Requests holding KV, in the order they were admitted (newest last)."""
    free_blocks: int
    block_size: int
    arrivals_pending: bool
    """Whether a further arrival is already known (False: none will come before
    something running finishes)."""
    decode_blocks: int | None = None
    """When every running request is decoding: the blocks they need, all together, to
    decode one more token each (None: not known; read the requests)."""
    prefix: PrefixCache | None = None
    """The prefix cache, to look up waiting requests' hits (None: no cache)."""
    lookahead: int = 0
    """Speculative decoding: draft tokens a decoding sequence also needs KV slots and
    budget for (vLLM's lookahead slots; 0 without speculation)."""


def prefix_hit(view: EngineView, req: Request) -> tuple[int, int]:
    """(prompt tokens a waiting *req* finds cached, free blocks those cached units take
    when it starts: they stop being evictable) — (0, 0) without a cache. The engine
    starts it from the same hit (vLLM ``get_computed_blocks``; SGLang ``match_prefix``)."""
    cache = view.prefix
    if cache is None or not req.keys or req.running:
        return 0, 0
    units, free_units = cache.lookup(req)
    return units * cache.unit_tokens, free_units * cache.unit_blocks


@dataclass(slots=True)
class BatchPlan:
    """One iteration's decision. An empty plan means: run nothing now."""

    prefill: list[tuple[Request, int]] = field(default_factory=list)
    """(request, prompt tokens to compute now): waiting requests start, running ones
    continue a chunked prefill."""
    decode: list[Request] = field(default_factory=list)
    """Running requests that emit one token each."""
    preempt: list[Request] = field(default_factory=list)
    """Running requests to preempt by recompute, in the order chosen."""
    rows: int = 0
    """Rows the batch occupies when larger than the decoding count: a static batch keeps
    the rows of finished members until it ends (set at formation and on every decode
    plan). Charged only to iterations that decode."""
    preempt_to_back: bool = False
    """Preempted requests re-enter the queue at the back (SGLang's retraction) instead
    of the front (vLLM)."""
    wait_until_s: float | None = None
    """With an empty plan: wake at this time (or on the next arrival, if sooner)."""
    passes: int = 1
    """Forward passes the iteration runs (llama.cpp: one per ubatch,
    :mod:`~lyra_simpy.policies.ubatch`); the cost model reads it as ``BatchShape.passes``."""
    checkpoints: int = 0
    """Context checkpoints copied before the iteration (llama.cpp on a sliding-window
    model); the cost model reads it as ``BatchShape.checkpoints``."""
    prefill_attention_cells: int = -1
    """Σ over the iteration's prompt tokens of the KV cells each attends over, where the
    scheduler knows them (llama.cpp's padded ``n_kv``,
    :func:`~lyra_simpy.policies.llamacpp_attention.step_attention`); -1: each prompt token
    attends its own sequence's cached and new tokens. The cost model reads it as
    ``BatchShape.prefill_attention_cells``."""
    output_passes: int = 1
    """Forward passes that carry an output row (llama.cpp: a generating slot's token or a
    prompt's last token, :func:`~lyra_simpy.policies.ubatch.pass_counts`; 0 for a step of
    prompt chunks that end no prompt); 1 for every other engine, which computes logits in
    every iteration. The cost model reads it as ``BatchShape.output_passes``."""
    pass_rows: tuple[int, ...] = ()
    """The decode rows of each forward pass of a decode-only iteration of several passes
    (llama.cpp with per-slot KV: one pass per run of consecutive slot ids,
    :func:`~lyra_simpy.policies.ubatch.ubatches`); empty otherwise. The cost model reads it
    as ``BatchShape.pass_rows``."""
    prefill_computed_cells: int = 0
    """The (query row, KV cell) pairs of attention the iteration computes for its prompt
    tokens, where the scheduler knows them (llama.cpp's CPU flash attention computes only
    the 64 × 64 tiles the mask leaves open,
    :func:`~lyra_simpy.policies.llamacpp_attention.step_attention`); 0 elsewhere. The cost
    model reads it as ``BatchShape.prefill_computed_cells``."""
    saved_tokens: int = 0
    """Tokens copied into a prompt cache in host RAM before the iteration (llama.cpp's
    ``--cache-ram``: the idle slots' states at each launch,
    :mod:`~lyra_simpy.policies.llamacpp_save`); the cost model reads it as
    ``BatchShape.saved_tokens``."""
    saved_reused_tokens: int = 0
    """Of ``saved_tokens``, the tokens' worth copied into memory the prompt cache held
    before (:mod:`~lyra_simpy.policies.llamacpp_save`: tracked with
    ``kv_kib_per_cell``); the cost model reads it as ``BatchShape.saved_reused_tokens``."""
    beside: bool = False
    """The prompts run beside the decodes, not in their iteration
    (``continuous.prefill_beside_decode``): the iteration lasts the longer of the two, each
    part costed on its own, and the prompts' first tokens come when their part ends."""

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class Scheduler(Protocol):
    """Forms the batch of each iteration.

    One rule lets the engine fuse iterations (:mod:`lyra_simpy.engine`): with nothing
    waiting and every running request decoding, :meth:`plan` decodes every running
    request with the ``rows`` of its previous plan, unless the KV pool cannot hold
    that (then the engine asks). A scheduler may also set ``holds_back_until_change =
    True``: once a plan decodes every running request and admits nothing, no plan
    admits anything before a request finishes or is preempted (true when admission
    depends only on free slots, the token budget and free KV, which only shrinks while
    everyone decodes); the engine then fuses those decodes though requests wait. The
    fused-vs-unfused property test checks both."""

    holds_back_until_change: bool
    """See above (False: decodes are fused only while nothing waits)."""
    fusable: bool
    """Decode iterations may be fused at all (False: every iteration is planned; for a
    scheduler whose decode cost depends on more than the rows and contexts the fused
    run knows, e.g. llama.cpp's passes per run of slot ids)."""

    @property
    def max_batch(self) -> int:
        """Most requests it runs at once."""
        ...

    def plan(self, view: EngineView) -> BatchPlan:
        """The next iteration's batch for the replica seen in *view*."""
        ...

    def refusal(
        self, request: Request, num_blocks: int, block_size: int, prompt_only: bool = False
    ) -> RejectReason | None:
        """Why *request* can never run on a replica with *num_blocks* KV blocks (None:
        it can). A request that cannot is rejected on arrival with this reason instead
        of blocking the queue. *prompt_only*: the replica only ever holds the prompt (a
        prefill replica of a disaggregated cluster; the request leaves after its first
        token), where the scheduler's own rules allow it."""
        ...


def preempt_gain(view: EngineView, victim: Request, dropped: dict[int, int]) -> int:
    """Blocks that preempting *victim* frees: its own, and the cached units only it (and
    the victims already counted in *dropped*, updated here) references — a unit another
    running request shares stays in use (vLLM frees a block when its last user does)."""
    cache = view.prefix
    if cache is None or not victim.held:
        return victim.blocks
    k = cache.unit_blocks
    gain = victim.blocks - len(victim.held) * k
    for unit in victim.held:
        users = dropped.get(id(unit), 0) + 1
        dropped[id(unit)] = users
        if unit.ref == users:
            gain += k
    return gain
