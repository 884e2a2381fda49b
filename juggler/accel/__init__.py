"""The machine's accelerators as Juggler sees them: which llama.cpp backends the library
that backends load was built with (`library`), which NVIDIA GPUs NVML finds and what each
process holds on them (`nvidia`), and which backend a load gets by default (`detect`).

Imported by the router, the manager and the engine; it imports nothing of Juggler's.
"""
