"""Plain class-run snapshots, in the shape engine.lab's class_snapshot answers (the class-run
API), for the pages' tests that need no engine."""

from __future__ import annotations

SETTINGS = {"preset": "tiny", "policy": "continuous", "max_batch": 16, "chunk_size": 0,
            "prefix_cache": False, "background_rps": 0.0, "lanes": False,
            "max_prompt_tokens": 256, "max_tokens": 64, "per_student_per_min": 20}


def request(rid, student, arrival, first=None, finish=None, ttft=None, itl=(), background=False):
    return {"id": rid, "student": student, "background": background, "arrival_s": arrival,
            "first_token_s": first, "finish_s": finish, "ttft_ms": ttft, "itl_ms": list(itl),
            "output_len": len(itl) + (first is not None)}


def snapshot(t_s, requests=(), steps=(), changes=(), active=True, **gauges):
    return {"active": active, "t_s": t_s, "settings": dict(SETTINGS),
            "knob_changes": list(changes),
            "in_flight": gauges.get("in_flight", 2), "waiting": gauges.get("waiting", 1),
            "kv_blocks_used": gauges.get("kv_blocks_used", 12), "kv_blocks_total": 256,
            "tokens_per_s": gauges.get("tokens_per_s", 40.0),
            "steps": list(steps), "requests": list(requests)}


def step(t_s, batch, prefill=0):
    return {"t_s": t_s, "batch": batch, "prefill_tokens": prefill, "kv_blocks_used": batch * 2}
