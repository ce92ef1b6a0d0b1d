"""The layering, enforced: the engine never imports Panel, Bokeh or param; the web side (lessons,
widgets, app.py) imports from the engine only its torch-free parts; and a web process really
never loads torch. The contracts are import-linter's, in pyproject.toml."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the web side may import from the engine (whole packages end with a dot).
WEB_MAY_IMPORT = ("engine.config", "engine.errors", "engine.paths", "engine.calc.",
                  "engine.lab.client", "engine.lab.events", "engine.lab.registry",
                  "engine.lab.params", "engine.lab.results", "engine.lab.cache",
                  "engine.lab.endpoint", "engine.lab.cores", "engine.lab.quality",
                  "engine.lab.setup_state")


def allowed(module: str) -> bool:
    return any(module == a or (a.endswith(".") and module.startswith(a)) or module + "." == a
               for a in WEB_MAY_IMPORT)


def test_the_import_contracts_hold():
    """Run in a process of its own: import-linter's lint_imports configures logging
    (logging.config.dictConfig, which disables every logger that exists by then) and puts the
    working directory on sys.path, so in this process it silenced the engine's loggers for
    every later test (test_cache's caplog then saw no warning when this file ran first)."""
    mine = logging.getLogger("engine.lab.cache")
    code = ("import sys\nfrom importlinter.cli import lint_imports\n"
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, "
            "no_cache=True, no_logo=True))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", out.stdout), out.stdout  # it ran
    assert not mine.disabled  # and left this process's logging as it was


def test_the_web_side_imports_from_the_engine_only_its_allowed_modules():
    """A whitelist (the contract above forbids a list; this catches a module added later)."""
    graph = grimp.build_graph("lessons", "widgets", "engine")
    web = sorted(m for m in graph.modules if m.split(".")[0] in ("lessons", "widgets"))
    bad = [(m, imported) for m in web for imported in graph.find_modules_directly_imported_by(m)
           if imported.startswith("engine") and not allowed(imported)]
    assert not bad, bad
    tree = ast.parse((ROOT / "app.py").read_text())
    from_app = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    from_app += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in from_app if m.startswith("engine") and not allowed(m)]


def web_modules() -> list[str]:
    names = ["app"]
    for package in ("lessons", "widgets"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names + [m.rstrip(".") for m in WEB_MAY_IMPORT if not m.endswith(".")]


def test_importing_the_web_side_and_building_pages_never_loads_torch(tmp_path):
    """Every web module imported, and two pages built as the router builds them for a reader
    (the about page and a lesson, which start the engine service: torch is the worker's)."""
    modules = web_modules()
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "import engine.calc.kv_math, engine.calc.slo_math, engine.calc.step_cost\n"
            "from lessons.shell.router import build_page\n"
            "build_page({'page': [b'about']}); build_page({'lesson': [b'knob']})\n"
            "print(sorted(m for m in ('torch', 'triton', 'safetensors', 'tokenizers')"
            " if m in sys.modules))")
    env = {**os.environ, "LLM_SPEED_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert len(modules) > 30  # every lesson and widget module was imported


@pytest.mark.parametrize("name", ["LLMEngine", "EngineConfig", "generate", "sweep", "run",
                                  "ConfigError", "SamplingParams", "SchedulerConfig"])
def test_the_public_api_is_named_by_the_package(name):
    import engine
    import engine.generate
    import engine.sweep

    assert name in engine.__all__
    value = getattr(engine, name)
    home = sys.modules[engine._MODULE_OF[name]]
    assert value is getattr(home, name)  # the function, even once its module was imported


def test_every_engine_module_imports():
    """A moved or renamed name breaks an import at once, not when a rarely used path runs."""
    import importlib
    import pkgutil

    import engine

    names = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")
             if not m.name.endswith("__main__")]
    for name in names:
        importlib.import_module(name)
    assert "engine.cli.main" in names and "engine.lab.jobs.serving" in names


def test_the_shell_sits_above_the_pages_and_widgets_below_them():
    """lessons/shell imports the lessons, never the other way round (what pages share lives in
    widgets/); widgets import no page."""
    graph = grimp.build_graph("lessons", "widgets", cache_dir=None)  # the tree as it is now

    def imports(module: str) -> set[str]:
        return graph.find_modules_directly_imported_by(module)

    pages = [m for m in graph.modules if m.startswith("lessons") and
             not m.startswith("lessons.shell")]
    assert "lessons.two_clocks" in pages and "lessons.base" in pages
    assert not [(m, i) for m in pages for i in imports(m) if i.startswith("lessons.shell")]
    widgets = [m for m in graph.modules if m.startswith("widgets")]
    assert not [(m, i) for m in widgets for i in imports(m) if i.startswith("lessons")]
    assert "lessons.registry" in imports("lessons.shell.index")  # the check sees the imports
