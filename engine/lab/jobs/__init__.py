"""The bodies of the engine service's jobs, grouped by what they run: measure (single steps:
sweep points, prefill passes, KV allocation), serving (the real-time serving loop), generation
(a reader's own text, streamed), machine (info and the worker's identity), and engines (the
engines a worker keeps). Imported by the worker process only (they import torch); the registry
(engine.lab.registry) names each body by its import path.
"""
