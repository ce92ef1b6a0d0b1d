"""axe-core (bundled by axe-playwright-python: nothing is downloaded) run on a page in Chromium,
with the WCAG 2.0/2.1 level A and AA rules; shadow DOMs (Panel renders every component in one)
are analysed too. Used by tests/ui/test_accessibility.py, and by the lesson tests
(tests/ui/test_lessons_*.py), which audit each lesson on the page they drew and checked."""

from __future__ import annotations

from collections import Counter

from axe_playwright_python.sync_playwright import Axe

WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
IMPACTS = ("critical", "serious", "moderate", "minor")
BLOCKING = ("critical", "serious")

_AXE = Axe()


def audit(page_or_frame) -> list[dict]:
    """axe's violations of the WCAG A/AA rules on the page (or frame) as it is now."""
    options = {"runOnly": {"type": "tag", "values": WCAG_TAGS},
               "resultTypes": ["violations"]}
    return _AXE.run(page_or_frame, options=options).response["violations"]


def counts(violations: list[dict]) -> dict[str, int]:
    """Violating nodes by impact (axe counts a rule once per element it fails on)."""
    tally = Counter()
    for v in violations:
        tally[v["impact"] or "minor"] += len(v["nodes"])
    return {impact: tally[impact] for impact in IMPACTS}


def summary(name: str, violations: list[dict]) -> str:
    """One line per page: the counts by impact and each rule's id, impact and node count."""
    c = counts(violations)
    rules = ", ".join(f"{v['id']}({v['impact']}:{len(v['nodes'])})" for v in violations)
    return (f"AXE {name}: critical={c['critical']} serious={c['serious']} "
            f"moderate={c['moderate']} minor={c['minor']} rules=[{rules}]")


def blocking_details(violations: list[dict]) -> str:
    """The critical and serious violations with a few of their elements, for a failure."""
    lines = []
    for v in violations:
        if v["impact"] in BLOCKING:
            lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
            for node in v["nodes"][:4]:
                lines.append(f"    {node['target']}: {node['html'][:160]}")
    return "\n".join(lines)


def assert_accessible(page_or_frame, name: str) -> None:
    """No critical or serious violation on the page as it is now; prints its summary line (seen
    with `pytest -s`). `name` is the page's: test_accessibility.py checks that every page the
    course map links is audited, here or there."""
    violations = audit(page_or_frame)
    print(summary(name, violations))
    blocking = [v for v in violations if v["impact"] in BLOCKING]
    assert not blocking, f"{name}: axe finds\n{blocking_details(violations)}"
