"""Torch-free formulas that the pages and the worker share: KV bytes (kv_math), a step's FLOPs and
bytes (step_cost), SLOs, goodput and cost (slo_math)."""
