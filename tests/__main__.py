"""`python -m tests [PYTEST ARGS]`: the whole suite as CI runs it, in three passes sharing one
results cache.

1. The machine's set-up is made once in the tests' results cache ($LLM_SPEED_TEST_CACHE, a temp
   dir unless set): the C++ kernels built, the matrix-product plans of the models most tests
   build timed and the machine's limits measured, so no test and no pytest-xdist worker compiles
   a kernel or times a plan (two workers timing the same plan at once take each other's cores,
   for minutes on two cores), and limits measured quietly are measured once.
2. `pytest -n 2 -m "not serial and not browser"`: the tests that need no quiet machine, two at a
   time.
3. `pytest -n 2 -m "browser and not serial"`: the browser tests (tests/ui), two at a time, each
   pytest-xdist worker serving its own app to its own Chromium, the two apps' engines on
   different cores and their measurements counted as quiet (tests/ui/ui_helpers.served_env).
4. `pytest -m serial`: the tests that measure on a real engine worker or server, assert a browser
   app's timings or bound a duration (tests/suite_passes.py: SERIAL), one at a time.
5. Each pass's processes write how many tests they collected and how many they kept
   (tests/conftest.py: COUNTS_ENV); the passes must have collected the same tests and kept all
   of them between them, so a test that no pass runs, or two run, fails the run.

Exit status: 0 when every pass passed and no test was lost, else 1 (2 for bad arguments).
Arguments go to every pass (a path, `-k`, `-x`); `-m` and `-n` are the runner's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: its plain helper modules
from suite_passes import COUNTS_ENV, PASSES, lost_tests  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# The presets whose engines most tests build (an engine built in a plain process, as a test
# builds one: the plan's key is this process's thread count, not the lab worker's).
PLANNED = ("tiny", "draft")
TIME_PLANS = ("import sys; from engine.config import EngineConfig; from engine.llm_engine import "
              "LLMEngine; [LLMEngine(EngineConfig(preset=p, device='cpu')) for p in sys.argv[1:]]")


def set_up_machine(env: dict[str, str]) -> None:
    """`python -m engine build-kernel`, the plans of PLANNED, then `info` (the machine's limits
    and the disturbance probe's profile, kept where measured quietly: the lesson tests' `info`
    jobs in this process's thread count read them), into the tests' cache. A failure is only
    reported: the kernel tests then skip (or fail where kernels are required, as in CI), and a
    test's first engine times its plan."""
    cache = {**env, "LLM_SPEED_CACHE": env["LLM_SPEED_TEST_CACHE"]}
    for what, args in (("the C++ kernels", ["-m", "engine", "build-kernel"]),
                       ("the plans", ["-c", TIME_PLANS, *PLANNED]),
                       ("the machine's limits", ["-m", "engine", "info", "--json"])):
        if subprocess.run([sys.executable, *args], cwd=ROOT, env=cache,
                          stdout=subprocess.DEVNULL if "info" in args else None).returncode != 0:
            print(f"tests: {what} were not made before the tests; see above", file=sys.stderr)


def read_counts(folder: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))]


def main(argv: list[str]) -> int:
    if any(arg in ("-m", "-n") or arg.startswith(("-m=", "-n=", "--numprocesses"))
           for arg in argv):
        print("error: python -m tests picks -m and -n itself (run pytest for one pass)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    own_cache = not env.get("LLM_SPEED_TEST_CACHE")
    if own_cache:
        env["LLM_SPEED_TEST_CACHE"] = tempfile.mkdtemp(prefix="llm-speed-test-cache-")
    counts_root = Path(tempfile.mkdtemp(prefix="llm-speed-test-counts-"))
    start = time.monotonic()
    try:
        set_up_machine(env)
        failed = []
        counts = {}
        for name, args in PASSES:
            folder = counts_root / name
            folder.mkdir()
            print(f"\n=== tests: the {name} pass: pytest {' '.join(args)}", flush=True)
            rc = subprocess.run([sys.executable, "-m", "pytest", *args, *argv], cwd=ROOT,
                                env={**env, COUNTS_ENV: str(folder)}).returncode
            if rc not in (0, 5):  # 5: this pass had no test to run (checked by the counts)
                failed.append(f"the {name} pass (pytest exit status {rc})")
            counts[name] = read_counts(folder)
        lost = lost_tests(counts)
        if lost:
            failed.append(lost)
        for line in failed:
            print(f"tests: FAILED: {line}", file=sys.stderr)
        if not failed:
            kept = {name: max((c["selected"] for c in found), default=0)
                    for name, found in counts.items()}
            print("tests: every pass passed; "
                  + ", ".join(f"{name} {n}" for name, n in kept.items())
                  + f" of {sum(kept.values())} collected, in {time.monotonic() - start:.0f} s "
                  "with the set-up")
        return 1 if failed else 0
    finally:
        shutil.rmtree(counts_root, ignore_errors=True)
        if own_cache:
            shutil.rmtree(env["LLM_SPEED_TEST_CACHE"], ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
