"""The class as the load: N simulated students sending prompts into one class run through the
engine service (engine.lab.class_service), the tiny engine, for a while.

    python bench/lab/class_mode.py [--students 30] [--seconds 60] [--max-batch 16] [--seed 0]
    python bench/lab/classroom.py --class-mode [same options]

Each student sends a prompt of its own (a few words of a fixed list), waits for its answer,
thinks for 1-5 s (seeded), and sends again, within the class run's bound of requests a minute.
A console reads class_snapshot once a second, as the teacher's page does. It prints, through
bench/harness.py:
- time to first token as a student sees it (class_send called to its first "token" event on the
  student's callback), p50 and p95, in seconds;
- the run's own TTFT (arrival to first token on the engine's clock) p50 and p95, from the
  class_run's summary;
- the console's update delay: for each finished request, the time from its "finished" event
  reaching its student to the first snapshot that shows it finished, p50 and p95 (a snapshot
  a second, so up to about a second is the polling itself);
- requests sent, finished, refused (a bound) and dropped.
The service's web side and this bench share a process, as a server's pages would.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.lab.client import EngineService  # noqa: E402

WORDS = ("the engine", "a batch", "the cache", "one token", "the queue", "a long prompt",
         "the class", "every step")


def p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Student(threading.Thread):
    """Sends, waits for the answer, thinks, sends again until told to stop."""

    def __init__(self, svc: EngineService, name: str, rng: random.Random, stop: threading.Event,
                 max_tokens: int, log: dict):
        super().__init__(daemon=True)
        self.svc, self.name, self.rng, self.stop = svc, name, rng, stop
        self.max_tokens, self.log = max_tokens, log

    def run(self) -> None:
        while not self.stop.is_set():
            done = threading.Event()
            sent = time.monotonic()
            first: list[float] = []
            rid: list[str | None] = [None]

            def on_event(e: dict, first=first, done=done, sent=sent, rid=rid) -> None:
                if e["type"] == "token" and not first:
                    first.append(time.monotonic() - sent)
                elif e["type"] == "finished":
                    self.log["finished_at"][rid[0]] = time.monotonic()
                    done.set()
                elif e["type"] == "dropped":
                    self.log["dropped"] += 1
                    done.set()

            prompt = " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(2, 6)))
            answer = self.svc.class_send(self.name, prompt, self.max_tokens, on_event)
            if not answer["ok"]:
                self.log["refused"] += 1
                self.stop.wait(5.0)
                continue
            rid[0] = answer["request_id"]
            self.log["sent"] += 1
            done.wait(120)
            if first:
                self.log["first_token_s"].append(first[0])
            self.stop.wait(self.rng.uniform(1.0, 5.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    run = Run("class_mode", args)
    cache = Path(tempfile.mkdtemp(prefix="class-mode-"))
    svc = EngineService(cache_path=cache / "results")
    try:
        svc.class_start({"max_batch": args.max_batch, "max_tokens": args.max_tokens})
        deadline = time.monotonic() + 300
        while not svc.class_snapshot()["ready"]:
            if time.monotonic() > deadline or not svc.class_active():
                raise SystemExit(f"the class run did not start: {svc.status()['start_error']}")
            time.sleep(0.1)
        log = {"sent": 0, "refused": 0, "dropped": 0, "first_token_s": [], "finished_at": {}}
        stop = threading.Event()
        rng = random.Random(args.seed)
        students = [Student(svc, f"student-{i}", random.Random(rng.random()), stop,
                            args.max_tokens, log) for i in range(args.students)]
        for s in students:
            s.start()
        seen: dict[str, float] = {}
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(1.0)
            now = time.monotonic()
            for r in svc.class_snapshot()["requests"]:
                if r["finish_s"] is not None and r["id"] not in seen:
                    seen[r["id"]] = now
        stop.set()
        for s in students:
            s.join(130)
        summary = svc.class_stop() or {}
    finally:
        svc.shutdown()
    delays = [seen[i] - t for i, t in log["finished_at"].items() if i in seen]
    first = log["first_token_s"]
    result = {
        "students": args.students, "seconds": args.seconds, "sent": log["sent"],
        "refused": log["refused"], "dropped": log["dropped"],
        "finished": summary.get("finished"),
        "first_token_s_p50": p(first, 0.5), "first_token_s_p95": p(first, 0.95),
        "engine_ttft_ms": summary.get("ttft_ms"),
        "snapshot_delay_s_p50": p(delays, 0.5), "snapshot_delay_s_p95": p(delays, 0.95),
        "snapshot_delay_s_mean": statistics.fmean(delays) if delays else None,
    }
    run.round(result)
    return run.finish(result)


if __name__ == "__main__":
    sys.exit(main())
