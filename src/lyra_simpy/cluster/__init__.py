"""Many replicas: the dispatcher that routes each arrival (:mod:`.dispatch`), the
routing policies it asks (:mod:`.routing`, registry ``ROUTERS`` beside their configs)
and prefill/decode disaggregation (:mod:`.disagg`: the hand-off queue and the KV link);
the ``cluster:`` block of a scenario and what one replica is made of (:mod:`.config`).

Nothing is imported here, so that importing one module does not import the others."""
