"""A lesson's words are readable without its view: every lessons/words module imports with no
Panel, Bokeh, param or torch loaded, and holds the words its lesson draws."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import lessons.words

HEAVY = ("panel", "bokeh", "param", "torch")
WORDS = sorted(m.name for m in pkgutil.iter_modules(lessons.words.__path__))
CHECK = f"""
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module("lessons.words." + name)
print(",".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
"""


def test_every_words_module_imports_without_panel_bokeh_param_or_torch():
    assert WORDS, "no words modules found"
    out = subprocess.run([sys.executable, "-c", CHECK, *WORDS], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "", f"lessons.words loads {out}"


def test_each_lesson_draws_the_words_of_its_module():
    import importlib

    from lessons.registry import LESSONS

    for info in LESSONS:
        module = info.view.split(":")[0].removeprefix("lessons.")
        if module not in WORDS:
            continue
        words = importlib.import_module(f"lessons.words.{module}")
        page = importlib.import_module(f"lessons.{module}")
        cls = getattr(page, info.view.split(":")[1])
        assert cls.objectives == words.OBJECTIVES and cls.questions == words.QUESTIONS
        assert cls.prediction == words.PREDICTION and cls.takeaway == words.TAKEAWAY
        assert cls.instructor == words.INSTRUCTOR
