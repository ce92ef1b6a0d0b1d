"""A run's timeline as Chrome trace-event JSON (`--trace-out FILE`), which ui.perfetto.dev and
chrome://tracing open.

The input is the `run` JSON shape (a run's, the server's /v1/engine/trace, or bench-client's,
whose steps are already on the client's clock). Two processes:

- "engine steps": one track, a complete event ("ph": "X") per engine step from its start to its
  end, named by its batch ("3 decode + 64 prefill"), with the step's record in args (running
  sequences, KV blocks, which requests decoded, which prefilled how many tokens);
- "requests": a track per request: "queued" from arrival to first admission, a "prefill" event
  for each step that prefilled a chunk of it (args: tokens), then "decode" from its first token
  to its last. A client's trace knows no admission: its request tracks show "waiting" from
  sending to the first token, then "decode"; the engine's prefill chunks join them when the
  server's trace matched the request (bench-client against our server). Where the record has
  them, "tokenize" spans the tokenizer's run on the prompt and "detokenize" the tokenizer's
  time on the output, ending when the text was ready (engine.serve.phases).

Times are microseconds on the run's clock ("ts" = seconds x 1e6), so a span's ends are the
record's own times, scaled.
"""

from __future__ import annotations

import json
from pathlib import Path

US = 1e6
STEPS_PID, REQUESTS_PID = 1, 2


def _span(name: str, pid: int, tid: int, start_s: float, end_s: float, args: dict | None = None
          ) -> dict:
    event = {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": start_s * US,
             "dur": max(0.0, end_s - start_s) * US}
    if args:
        event["args"] = args
    return event


def _meta(kind: str, pid: int, tid: int, name: str) -> dict:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def step_name(step: dict) -> str:
    parts = []
    if step["decode_seqs"]:
        parts.append(f"{step['decode_seqs']} decode")
    if step["prefill_tokens"]:
        parts.append(f"{step['prefill_tokens']} prefill")
    return " + ".join(parts) or "idle"


def chrome_trace(run: dict, track_of: dict[int, int] | None = None) -> dict:
    """The trace-event object of a run-shaped dict. track_of maps an engine request id (as the
    steps name it) to the request id of its track, when the two differ (a client's trace);
    without it they are the same."""
    events = [_meta("process_name", STEPS_PID, 0, "engine steps"),
              _meta("thread_name", STEPS_PID, 1, "steps (batch)"),
              _meta("process_name", REQUESTS_PID, 0, "requests")]
    if track_of is None:
        track_of = {r["id"]: r["id"] for r in run["requests"]}
    prefills: dict[int, list[dict]] = {}
    for step in run.get("steps", []):
        args = {k: step[k] for k in ("index", "running", "prefill_tokens", "decode_seqs",
                                     "kv_blocks_used", "decode_ids", "prefill_chunks")
                if k in step}
        events.append(_span(step_name(step), STEPS_PID, 1, step["start_s"], step["end_s"], args))
        for engine_id, tokens in step.get("prefill_chunks", []):
            if engine_id in track_of:
                prefills.setdefault(track_of[engine_id], []).append(
                    _span("prefill", REQUESTS_PID, 0, step["start_s"], step["end_s"],
                          {"tokens": tokens, "step": step.get("index")}))
    for r in run["requests"]:
        if r.get("arrival_s") is None:
            continue  # never sent (a closed-loop request a cancelled run did not release)
        tid = r["id"] + 1  # tid 0 is the process's own
        events.append(_meta("thread_name", REQUESTS_PID, tid, f"request {r['id']}"))
        first, admitted = r.get("first_token_s"), r.get("admitted_s")
        if r.get("tokenize_start_s") is not None and r.get("tokenize_end_s") is not None:
            events.append(_span("tokenize", REQUESTS_PID, tid, r["tokenize_start_s"],
                                r["tokenize_end_s"]))
        if r.get("response_s") is not None and r.get("detokenize_s"):
            events.append(_span("detokenize", REQUESTS_PID, tid,
                                r["response_s"] - r["detokenize_s"], r["response_s"]))
        if admitted is not None:
            events.append(_span("queued", REQUESTS_PID, tid, r["arrival_s"], admitted))
        elif first is not None:
            events.append(_span("waiting", REQUESTS_PID, tid, r["arrival_s"], first))
        for event in prefills.get(r["id"], []):
            events.append({**event, "tid": tid})
        if first is not None:
            end = r.get("finish_s") or r["token_s"][-1]
            events.append(_span("decode", REQUESTS_PID, tid, first, end,
                                {"tokens": len(r["token_s"]), "prompt_len": r["prompt_len"]}))
    other = {k: run.get(k) for k in ("device", "preset", "policy", "source") if k in run}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(path: str | Path, run: dict, track_of: dict[int, int] | None = None) -> None:
    Path(path).write_text(json.dumps(chrome_trace(run, track_of)), encoding="utf-8")
