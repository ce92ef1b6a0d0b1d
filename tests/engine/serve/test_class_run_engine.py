"""The class run's engine side (engine.serve.class_run) with the real tiny engine, driven in
this process: live knobs applied between two steps (policy, batch limit, chunked prefill,
prefix cache), the background load, and every block given back at the end."""

from __future__ import annotations

import time

from engine.serve.class_knobs import ClassSettings
from engine.serve.class_run import BACKGROUND, ClassRun

PROMPT = "The engine reads the whole prompt first, and then"


class Script:
    """The run's inbox: messages handed in once the run reaches a step index (or sooner, when
    it has nothing left to do), then "stop" once every request has ended (or after a time
    limit: the test fails then)."""

    def __init__(self, run: ClassRun, at: dict[int, list[dict]], limit_s: float = 120.0,
                 stop_when=None):
        self.run, self.at = run, dict(at)
        self.deadline = time.monotonic() + limit_s
        self.stop_when = stop_when or (lambda: not self.at and not run.requests)

    def __call__(self, timeout_s: float) -> list[dict]:
        step = self.run.loop.step_count
        keys = sorted(self.at)
        if keys and (keys[0] <= step or not self.run.requests):
            return self.at.pop(keys[0])
        if self.stop_when() or time.monotonic() > self.deadline:
            return [{"op": "stop"}]
        if timeout_s:
            time.sleep(min(timeout_s, 0.01))
        return []


def send(i: int, prompt: str = PROMPT, student: str = "s", max_tokens: int = 8) -> dict:
    return {"op": "send", "id": f"r{i}", "student": student, "prompt": prompt,
            "max_tokens": max_tokens}


def serve(engine, settings: ClassSettings, at: dict[int, list[dict]], **kw) -> tuple:
    batches: list[dict] = []
    run = ClassRun(engine, settings, batches.append)
    script = Script(run, at, **kw)
    summary = run.run(script, lambda: False)
    assert time.monotonic() < script.deadline, "the run did not end in time"
    events = [e for b in batches for e in b["events"]]
    return run, summary, events


def of(events, kind):
    return [e for e in events if e["type"] == kind]


def test_policy_switches_mid_run_keep_every_request(engine):
    settings = ClassSettings(max_batch=4, max_tokens=8)
    at = {0: [send(i, student=f"s{i % 3}") for i in range(8)],
          3: [{"op": "set", "changes": {"policy": "static"}}],
          12: [{"op": "set", "changes": {"policy": "dynamic"}}, send(8)],
          20: [{"op": "set", "changes": {"policy": "continuous", "max_batch": 2}}, send(9)]}
    run, summary, events = serve(engine, settings, at)
    assert summary["finished"] == 10 and summary["dropped"] == 0
    knobs = of(events, "knob")
    assert knobs[0]["step"] == 3 and knobs[0]["preempted"] == 4  # continuous held four
    # slots: those requests wait again, whole
    assert knobs[0]["step"] < knobs[1]["step"] < knobs[2]["step"]
    assert knobs[2]["changes"] == {"policy": "continuous", "max_batch": 2}
    assert all(s["batch"] <= 2 for s in of(events, "step") if s["index"] >= knobs[2]["step"])
    assert summary["settings"]["policy"] == "continuous"
    assert [k["step"] for k in summary["knob_changes"]] == [k["step"] for k in knobs]


def test_chunked_prefill_budget_applies_from_the_next_step(engine):
    long = " ".join(["word"] * 150)
    settings = ClassSettings(max_batch=4, max_tokens=4, max_prompt_tokens=200)
    at = {0: [send(0, long, max_tokens=4)],
          50: [{"op": "set", "changes": {"chunk_size": 32}}, send(1, long, max_tokens=4)]}
    run, summary, events = serve(engine, settings, at)
    steps = of(events, "step")
    (knob,) = of(events, "knob")
    assert max(s["prefill_tokens"] for s in steps if s["index"] < knob["step"]) >= 150  # whole
    later = [s["prefill_tokens"] for s in steps if s["index"] >= knob["step"]]
    assert max(later) <= 32 and sum(later) >= 150  # in chunks of 32
    assert summary["finished"] == 2


def test_prefix_cache_turns_on_live_and_is_put_back_at_the_end(engine):
    shared = " ".join(["alpha beta gamma"] * 20)
    assert not engine.blocks.prefix_caching
    settings = ClassSettings(max_batch=4, max_tokens=4, max_prompt_tokens=200)
    hits = engine.blocks.stats.hits
    at = {0: [send(0, shared, max_tokens=4)], 50: [send(1, shared, max_tokens=4)],
          51: [{"op": "set", "changes": {"prefix_cache": True}}, send(2, shared, max_tokens=4)],
          52: [send(3, shared, max_tokens=4)]}
    run, summary, events = serve(engine, settings, at)
    assert summary["finished"] == 4
    assert engine.blocks.stats.hits == hits + 1  # only the request after one ran with it on
    assert not engine.blocks.prefix_caching and engine.blocks.num_cached == 0


def test_background_load_arrives_at_its_rate_and_stops_when_set_to_zero(engine):
    settings = ClassSettings(max_batch=8, max_tokens=8, background_rps=20.0)
    batches: list[dict] = []
    run = ClassRun(engine, settings, batches.append, seed=3)
    started = time.monotonic()

    def inbox(timeout_s: float) -> list[dict]:
        if run.settings.background_rps and time.monotonic() - started > 1.0:
            return [{"op": "set", "changes": {"background_rps": 0.0}}]
        if not run.settings.background_rps and not run.requests:
            return [{"op": "stop"}]
        time.sleep(min(timeout_s, 0.01))
        return []

    summary = run.run(inbox, lambda: False)
    events = [e for b in batches for e in b["events"]]
    arrived = of(events, "arrived")
    assert arrived and all(e["student"] == BACKGROUND and e["background"] for e in arrived)
    (knob,) = of(events, "knob")
    assert all(e["arrival_s"] <= knob["t_s"] for e in arrived)  # none after the rate went to 0
    rate = len(arrived) / knob["t_s"]
    assert 5 <= rate <= 60, rate  # Poisson arrivals at 20 a second, until the change
    assert summary["background_requests"] == len(arrived)
    assert summary["finished"] == summary["background_requests"]
    assert summary["requests"] == 0 and summary["students"] == 0
    assert all(t["text"] == "" for t in of(events, "token"))  # no text for nobody's request


def test_a_request_over_the_prompt_bound_is_dropped_with_its_reason(engine):
    settings = ClassSettings(max_batch=4, max_tokens=4, max_prompt_tokens=8)
    run, summary, events = serve(engine, settings, {0: [send(0, PROMPT, max_tokens=4),
                                                        send(1, "Hi", max_tokens=4)]})
    (dropped,) = of(events, "dropped")
    assert dropped["id"] == "r0" and "at most 8 tokens" in dropped["reason"]
    assert summary["finished"] == 1 and summary["dropped"] == 1
