"""Prefill/decode disaggregation: a prefill worker and a decode worker, each its own process and
engine on one model, the KV blocks of each finished prefill handed from one to the other
(handover.py, workers.py, live.py). Where the engine has fewer than two cores of its own, the
disaggregated side is computed from measured step costs (costs.py, engine/calc/disagg_replay.py)."""
