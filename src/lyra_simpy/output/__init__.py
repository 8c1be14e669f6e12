"""Presentation, in one place: the result writer that runs a scenario's variants and
writes their files (:mod:`.writer`), printed tables (:mod:`.tables`), figures
(:mod:`.figures`, :mod:`.plots`, :mod:`.style`), the run manifest (:mod:`.provenance`),
Perfetto timelines (:mod:`.trace_events`), progress bars (:mod:`.progress`) and the
capacity report (:mod:`.capacity_report`).

Nothing is imported here, so that importing one module does not import the others."""
