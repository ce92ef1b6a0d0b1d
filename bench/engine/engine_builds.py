"""What a model build costs the lab's worker, on two source trees side by side: the seconds of each
step, the memory it leaves the worker holding, and whether the engines it makes compute the same.

In a class the worker builds the lessons' models (tiny; small for the roofline) while readers'
first jobs wait behind it, and holds them afterwards (engine.lab.jobs.engines keeps two). Each
round starts one fresh process per tree (alternating which goes first), pinned with one thread as
the worker pins itself (engine.lab.worker.isolate), which builds each preset as the worker does
(engines.build, the matrix-product plans read from the bench's cache, as `python -m engine tune`
or the app's set-up job leaves them) and reports every step's seconds, its resident memory before and after, a decode
step's median time at batch 1 and 8 (engine.sweep.measure_point) and a greedy continuation's
tokens. Every round is printed, then the medians and their ratio (second tree / first). Target:
each preset's engines of both trees continue a prompt with the same tokens. The harness's JSON
result last (bench/harness.py).

    python bench/engine/engine_builds.py --trees ../main . [--presets tiny,small] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from bench.lab.classroom import fresh_cache  # noqa: E402

# Runs in the child, with the tree under test first on its path.
CHILD = r"""
import json, sys, time
from engine.lab.worker import isolate
isolate(None, None)
from engine.generate import generate
from engine.lab.jobs import engines
from engine.sweep import measure_point

def rss_mib():
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024

out = {}
for preset in sys.argv[1:]:
    key = (preset, "cpu", "auto", None, False, "fp32", False)
    steps, last = {}, [time.monotonic()]
    def on_step(what):
        now = time.monotonic()
        name = "plan timing" if ("round" in what or "timed for" in what) else what
        steps[name] = steps.get(name, 0.0) + now - last[0]
        last[0] = now
    before, start = rss_mib(), time.monotonic()
    engine = engines.build(key, None, on_step)
    steps["warm-up"] = time.monotonic() - last[0]
    row = {"build_s": time.monotonic() - start, "steps": steps,
           "rss_before_mib": before, "rss_after_mib": rss_mib()}
    for batch in (1, 8):
        row[f"tpot_b{batch}_ms"] = measure_point(engine, batch, 64, 16).tpot_ms
    row["tokens"] = [g.seq.output_ids for g in generate(engine, [[5, 6, 7, 8]], 12,
                                                        ignore_eos=True)][0]
    out[preset] = row
print("RESULT " + json.dumps(out))
"""

FIGURES = ("build_s", "rss_added_mib", "tpot_b1_ms", "tpot_b8_ms")


def one_round(tree: str, presets: list[str], cache: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, *presets], text=True, timeout=600,
                          capture_output=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": tree, "LLM_SPEED_CACHE": cache})
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"error: the build in {tree} failed: {tail}")
    out = json.loads(line.removeprefix("RESULT "))
    for row in out.values():
        row["rss_added_mib"] = row["rss_after_mib"] - row["rss_before_mib"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    if args.rounds < 1 or not all((Path(t) / "engine").is_dir() for t in trees):
        parser.error("two source trees (each with engine/) and at least one round")
    presets = args.presets.split(",")
    run = Run("engine_builds", args)
    cache = fresh_cache("engine-builds-", kernels=True)
    runs: list[list[dict]] = [[], []]  # by position: the same tree twice is an A/A run
    for r in range(args.rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            tree = trees[i]
            out = one_round(tree, presets, cache)
            runs[i].append(out)
            for preset, row in out.items():
                steps = ", ".join(f"{k} {v:.2f}" for k, v in row["steps"].items())
                run.round({"round": r + 1, "tree": tree, "preset": preset,
                           **{k: v for k, v in row.items() if k != "tokens"}},
                          f"round {r + 1} {tree}: {preset} build {row['build_s']:.2f} s "
                          f"({steps}); RSS {row['rss_before_mib']:.0f} -> "
                          f"{row['rss_after_mib']:.0f} MiB (+{row['rss_added_mib']:.0f}); step "
                          f"b1 {row['tpot_b1_ms']:.2f} ms, b8 {row['tpot_b8_ms']:.2f} ms")
    before, after = trees
    medians: dict[str, dict] = {}
    for preset in presets:
        same = all(a[preset]["tokens"] == b[preset]["tokens"]
                   for a in runs[0] for b in runs[1])
        print(f"{preset}: the same tokens from every engine of both trees: {same}")
        run.target(f"{preset}: the same tokens from both trees (1 = yes)", float(same),
                   at_least=1.0)
        medians[preset] = {}
        for figure in FIGURES:
            b = statistics.median(out[preset][figure] for out in runs[0])
            a = statistics.median(out[preset][figure] for out in runs[1])
            medians[preset][figure] = {"before": b, "after": a, "ratio": a / b if b else None}
            print(f"  {figure:14s} median before {b:8.2f}  after {a:8.2f}  ratio "
                  f"{a / b if b else float('nan'):.3f}")
    return run.finish({"before": before, "after": after, "medians": medians},
                      log={"medians": medians})


if __name__ == "__main__":
    sys.exit(main())
