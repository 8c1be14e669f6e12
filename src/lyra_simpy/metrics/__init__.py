"""Measure and summarise: the passive collector, the vLLM-named summary, file I/O."""
