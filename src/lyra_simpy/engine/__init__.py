"""One serving engine (a *replica*), as a SimPy process.

- :mod:`.replica` — the process: each loop takes arrivals, plans an iteration and runs
  it, or sleeps until the next arrival.
- :mod:`.iteration` — one iteration: KV allocated, the cost model charged
  (``Iterations._step``), one sleep, tokens emitted (``_commit``, ``_emit``).
- :mod:`.runs` — requests leaving (``_finish``, ``_release``) and fused decode runs,
  slept and committed as one event.
- :mod:`.intake` — where a request enters: taken when due, refused when it can never be
  served, queued, rejected or deferred by the admission policy.
- :mod:`.fused` — planning a run of decode iterations as one event (pure: no SimPy).
- :mod:`.decode_clock` — decoding requests on one shared clock.
- :mod:`.kv` — the KV block pool (and the free queue it shares with the prefix cache).
- :mod:`.request` — a request's state, its statuses and reject reasons.
- :mod:`.timing` — exact SimPy times and the phases of one instant.
- :mod:`.speculative` — speculative decoding's acceptance draws.

Nothing is imported here, so that importing one module does not import the others (the
policies import :mod:`.request`, and :mod:`.replica` imports the policies)."""
