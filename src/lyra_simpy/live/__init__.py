"""Live endpoints: replay a scenario's workload on a real server, profile its step costs,
compare simulated with real runs, and run llama.cpp's server on a CPU.

Modules: ``client`` (one streamed request, timed), ``workload`` (the simulator's own
draws as prompts), ``replay``, ``profile``, ``compare``, ``llamacpp``.
"""
