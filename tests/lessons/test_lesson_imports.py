"""No lesson imports another lesson: what two lessons share lives in engine/calc, widgets/ or a
lessons/ module that is not a page, so a lesson can move or go without breaking another."""

from __future__ import annotations

import ast
from pathlib import Path

from lessons.registry import LESSONS

LESSONS_DIR = Path(__file__).resolve().parents[2] / "lessons"
PAGES = {info.view.partition(":")[0] for info in LESSONS}  # "lessons.knob", ...


def imported_modules(path: Path) -> set[str]:
    """The absolute names of the modules a lessons/ module imports (relative ones resolved)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = ["lessons", *path.relative_to(LESSONS_DIR).parent.parts]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_the_registry_names_lesson_modules():
    assert "lessons.knob" in PAGES and "lessons.slo_goodput" in PAGES


def test_no_lesson_imports_another():
    for page in sorted(PAGES):
        path = LESSONS_DIR / (page.removeprefix("lessons.").replace(".", "/") + ".py")
        others = imported_modules(path) & (PAGES - {page})
        assert not others, f"{page} imports {sorted(others)}"


def test_the_check_sees_a_relative_import():
    fake = LESSONS_DIR / "shell" / "router.py"  # imports lessons through the registry only
    assert "lessons.registry" in imported_modules(fake)
