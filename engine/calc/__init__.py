"""Torch-free formulas that the pages and the worker share: KV bytes (kv_math), a step's FLOPs and
bytes (step_cost), SLOs, goodput and cost (slo_math), what a finding becomes on a
data-centre GPU from its public specs (gpu_scaling)."""
