"""A lesson's words live in lessons/words/<concept>.py, readable without the page's code: each
words module loads without Panel, Bokeh, param or torch, holds the constants its lesson draws,
and no lesson module imports another lesson."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from lessons.registry import LESSONS

ROOT = Path(__file__).resolve().parents[2]
WORDS = sorted(p.stem for p in (ROOT / "lessons" / "words").glob("*.py") if p.stem != "__init__")
LESSON_MODULES = {info.view.partition(":")[0] for info in LESSONS}


@pytest.mark.parametrize("concept", WORDS)
def test_a_words_module_loads_without_the_web_side_or_torch(concept):
    code = (f"import sys, lessons.words.{concept} as w; "
            "print(sorted(m for m in ('panel', 'bokeh', 'param', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]", f"lessons.words.{concept} loads {out}"


@pytest.mark.parametrize("concept", WORDS)
def test_the_lesson_draws_its_words_from_its_words_module(concept):
    module = f"lessons.{concept}"
    if module not in LESSON_MODULES:
        pytest.skip(f"{module} is not a lesson page")
    words = __import__(f"lessons.words.{concept}", fromlist=["_"])
    view = __import__(module, fromlist=["_"])
    for name in ("OBJECTIVES", "PREDICTION", "TAKEAWAY", "INSTRUCTOR", "QUESTIONS"):
        assert getattr(view, name) is getattr(words, name), (concept, name)
    (info,) = [i for i in LESSONS if i.view.partition(":")[0] == module]
    page = getattr(view, info.view.partition(":")[2])  # the lesson class draws them
    assert page.objectives == words.OBJECTIVES and page.questions == words.QUESTIONS
    assert page.prediction == words.PREDICTION and page.takeaway == words.TAKEAWAY
    assert page.instructor == words.INSTRUCTOR
    tree = ast.parse((ROOT / "lessons" / f"{concept}.py").read_text())
    defined = {t.id for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)}
    assert not defined & {"INTRO", "OBJECTIVES", "PREDICTION", "TAKEAWAY", "INSTRUCTOR",
                          "QUESTIONS", "QUOTE"}, concept


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved against lessons."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = "lessons." * (node.level == 1) + (node.module or "")
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return found


@pytest.mark.parametrize("module", sorted(LESSON_MODULES))
def test_no_lesson_imports_another_lesson(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    others = (LESSON_MODULES - {module}) & imported_modules(path)
    assert not others, f"{module} imports {sorted(others)}"
