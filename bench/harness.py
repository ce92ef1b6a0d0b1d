"""What every benchmark does the same way, in one place: the machine's load average before and
after, every round printed as it ends, targets met or MISSED, the JSON result on stdout, and one
JSON line per run appended to bench/results/<bench>.jsonl with the machine, the date and the
commit, so that a figure quoted anywhere can be traced to the run that measured it.

    run = Run("policies", args)              # prints the load average before
    for i in range(args.rounds):
        run.round({"round": i + 1, ...})     # printed at once, kept for the result
    run.target("continuous / static throughput", ratio, at_least=1.3)
    return run.finish({...})                 # exit status: 1 if a target was MISSED

A bench's figures are ratios measured in one run (so they share the machine's load); the load
average says how quiet that machine was. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
_ON_THE_LINE = ("bench", "targets", "load_average_before", "load_average_after")  # not twice


def load_average() -> list[float]:
    """The system's load average over 1, 5 and 15 minutes, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """What the figures were measured on: host, CPU model, core count, system, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "cpus": os.cpu_count(),
            "system": platform.platform(), "python": platform.python_version()}


def commit() -> str | None:
    """The checkout's commit, with "+dirty" when its tracked files have changes; None outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


class Run:
    """One run of a benchmark named `name` (its results file's name)."""

    def __init__(self, name: str, args: argparse.Namespace | dict | None = None) -> None:
        self.name = name
        self.args = vars(args) if isinstance(args, argparse.Namespace) else dict(args or {})
        self.rounds: list[dict] = []
        self.targets: list[dict] = []
        self.started = time.time()
        self.load_before = load_average()
        print(f"{name}: {os.cpu_count()} CPUs, load average before {self.load_before}",
              flush=True)

    def round(self, figures: dict, line: str | None = None) -> dict:
        """Keep one round's figures and print them now (`line`, or the figures as JSON)."""
        self.rounds.append(figures)
        print(line if line is not None else
              f"round {len(self.rounds)}: {json.dumps(figures, default=str)}", flush=True)
        return figures

    def target(self, what: str, value: float, *, at_least: float | None = None,
               at_most: float | None = None) -> bool:
        """A target the run is judged by: `value` at least (or at most) the limit; True if met."""
        if (at_least is None) == (at_most is None):
            raise ValueError("a target has one limit: at_least or at_most")
        met = value >= at_least if at_least is not None else value <= at_most
        self.targets.append({"target": what, "value": round(value, 4),
                             "limit": at_least if at_least is not None else at_most,
                             "kind": "at least" if at_least is not None else "at most",
                             "met": bool(met)})
        return bool(met)

    def finish(self, result: dict, *, log: dict | None = None) -> int:
        """Print the targets and the load average after, then the JSON result (the last line of
        stdout); write it to bench/results/<name>.json and append its line (`log`, else the
        result) to <name>.jsonl. The exit status: 1 if a target was MISSED, else 0."""
        load_after = load_average()
        for t in self.targets:
            print(f"[{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']} "
                  f"({t['kind']} {t['limit']})")
        print(f"load average before {self.load_before}, after {load_after}")
        result = {"bench": self.name, **result, "targets": self.targets,
                  "load_average_before": self.load_before, "load_average_after": load_after,
                  "wall_s": round(time.time() - self.started, 1)}
        if self.rounds and "rounds" not in result:
            result["rounds"] = self.rounds
        line = {"bench": self.name,
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "commit": commit(), "machine": machine(), "args": self.args,
                "load_average_before": self.load_before, "load_average_after": load_after,
                "targets": self.targets,
                "result": log if log is not None else {k: v for k, v in result.items()
                                                       if k not in _ON_THE_LINE}}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{self.name}.json").write_text(json.dumps(result, indent=1, default=str))
        with open(RESULTS / f"{self.name}.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line, default=str) + "\n")
        print(json.dumps(result, default=str))
        sys.stdout.flush()
        return 0 if all(t["met"] for t in self.targets) else 1
