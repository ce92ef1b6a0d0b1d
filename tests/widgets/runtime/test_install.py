"""widgets.runtime.install, as the served app runs it: every process-wide patch in place, in a
process of its own (the patches change Bokeh, Panel, asyncio's logger and malloc for good); and
bokeh, panel and tornado pinned, upper bounds too, to a range the installed versions are in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

ROOT = Path(__file__).resolve().parents[3]

CHECK = """if True:
    import json, logging, os
    import app  # `panel serve app.py` runs it: the patches are installed there
    from widgets import runtime
    from widgets.runtime import heap
    print(json.dumps({**runtime.installed(), "glibc": heap._mallopt is not None,
                      "pythonmalloc": os.environ.get("PYTHONMALLOC"),
                      "trims_logged": logging.getLogger(heap.__name__).isEnabledFor(logging.INFO)}))
"""


def test_the_served_app_installs_every_patch():
    """What each patch does is tested beside it (test_heap: big blocks apart, in a fresh
    process); here, that the app's one call puts every one in place."""
    env = {**os.environ, "PYTHONMALLOC": "malloc"}  # the README's class command sets it
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["bokeh_defaults"] and seen["shared_stylesheets"] and seen["closed_sockets"]
    assert seen["big_blocks_apart"] == seen["glibc"]  # malloc set where there is glibc
    assert seen["pythonmalloc"] is None  # dropped: the engine worker keeps pymalloc
    assert seen["trims_logged"]


def _pins() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = [Requirement(r) for r in project["project"]["dependencies"]]
    return {r.name: r for r in reqs}


def test_the_patched_libraries_are_pinned_to_a_range_holding_the_installed_ones():
    pins = _pins()
    for name in ("bokeh", "panel", "tornado"):
        spec = pins[name].specifier
        assert any(s.operator == "<" for s in spec), f"{name} has no upper bound: {spec}"
        assert spec.contains(version(name)), f"{name} {version(name)} is outside {spec}"
