"""One serving engine (a *replica*), as a SimPy process.

- :mod:`.replica` — the process: each loop plans an iteration, charges the cost model
  (``Replica._step``), sleeps once, then emits tokens and finishes requests
  (``Replica._commit``, ``_emit``, ``_finish``); fused decode runs are slept and committed
  here too.
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
