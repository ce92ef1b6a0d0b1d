"""The README and the docs site agree with the code, and the site builds without a broken link.

The site (docs/mkdocs.yml) is built with MkDocs' --strict, which fails on a link to a missing
page or anchor. The README is the front door: short, every page's URL, the set-up commands that
.ci/run runs, and no history. The command-line reference names every option the parser has.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli.main import build_parser
from lessons.registry import LESSONS
from lessons.shell.router import PAGES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
CLI_PAGE = (ROOT / "docs" / "pages" / "cli.md").read_text(encoding="utf-8")
# "at 1b40779", "commit 69bc208", a date: history belongs in bench/results/ or docs/decisions/
HISTORY = re.compile(r"\b(at|commit|since|before|after) `?[0-9a-f]{7,40}\b|\b20\d\d-[01]\d-[0-3]\d\b")


def test_the_site_builds_strictly(tmp_path):
    """mkdocs build --strict: every link and anchor resolves, every page is in the navigation."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "docs" / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for page in ("index.html", "teaching/index.html", "cli/index.html",
                 "decisions/index.html", "results/classroom/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_readme_is_short():
    assert len(README.splitlines()) <= 250


def test_readme_has_every_pages_url():
    for info in LESSONS:
        assert f"`/app?lesson={info.slug}`" in README, info.slug
    for page in PAGES:
        assert f"/app?page={page}" in README, page


def test_readme_has_no_history():
    found = [line for line in README.splitlines() if HISTORY.search(line)]
    assert not found, found


def test_readme_installs_as_ci_does():
    """Each install step of .ci/run, and its test command, appears in the README as written."""
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if re.match(r"\s*(apt-get install|python -m pip install|python -m pytest)", line)]
    assert any("pip install -e '.[test]'" in step for step in steps)
    for step in steps:
        assert step in README, step


def _subcommands() -> dict:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sub.choices


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_cli_reference_names_every_option(name):
    """docs/pages/cli.md has a section for each subcommand and names each of its options."""
    assert re.search(rf"^## {re.escape(name)}$", CLI_PAGE, re.MULTILINE), name
    for action in _subcommands()[name]._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                named = rf"(?<![\w-]){re.escape(option)}(?![\w-])"
                assert re.search(named, CLI_PAGE), f"{name} {option}"


def test_readme_links_resolve():
    """Every relative link and image of the README names a file of the repository."""
    targets = re.findall(r"\]\(([^)#\s]+)", README)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing
