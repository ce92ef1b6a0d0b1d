"""The header of a chart's downloaded data: what measured it, how, when, and how far to trust it.

The same facts a bench record carries (device, engine version, preset, the job's parameters, when
it was measured, from the cache or fresh, the disturbance check), gathered from a page's results
and their events, for widgets.data_download. A reader who has the file can redo the analysis, or
ask this engine for the same measurement by the same parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.lab.events import JobEvent
from engine.lab.results import Record
from widgets.data_download import now_utc
from widgets.tables import sig

from .base import LessonPage

NOT_CHECKED = "not recorded (this engine version runs no disturbance check)"


def engine_version(page: LessonPage) -> str:
    """The engine version the page's service reports ('unknown' before the engine is up)."""
    try:
        return page.jobs.service.status().get("engine_version") or "unknown"
    except Exception:  # noqa: BLE001 - a header never fails a download
        return "unknown"


def check_text(result: Record | None) -> str:
    """The disturbance check of a result in words (engine.lab.quality, when a result has one)."""
    check = getattr(result, "check", None)
    if check is None:
        return NOT_CHECKED
    if check.disturbed:
        return "disturbed: " + "; ".join(check.reasons)
    return "quiet: no other work took the engine's cores while it measured"


def check_cell(result: Record | None) -> str:
    """The disturbance check cut to a table cell: 'quiet', 'DISTURBED: why', or 'not checked'."""
    check = getattr(result, "check", None)
    if check is None:
        return "not checked"
    return "DISTURBED: " + "; ".join(check.reasons) if check.disturbed else "quiet"


def spread_cell(result: Record | None) -> str:
    """'5.10\u20135.60': the p10 to p90 (ms) of what a result timed (its decode steps, engine
    steps...: result.spread), a dash when it timed nothing or has no spread."""
    spread = getattr(result, "spread", None)
    if spread is None or spread.p10 is None or spread.p90 is None:
        return "\u2013"
    return f"{sig(spread.p10)}\u2013{sig(spread.p90)}"


def origin_text(event: JobEvent | None) -> str:
    """'cached, measured 2026-11-23T19:02:11+00:00' or 'fresh, measured ...'."""
    if event is None:
        return "not measured yet"
    when = event.measured_at or "at an unknown time"
    return f"{'cached' if event.cached else 'fresh'}, measured {when}"


def data_header(page: LessonPage, kind: str, params: dict, *, device: str, preset: str,
                measured: str, check: str, **more) -> dict:
    """The header a download of `page`'s chart carries."""
    return {"lesson": f"{page.title} (app?lesson={page.slug})",
            "device": device or "unknown", "engine_version": engine_version(page),
            "preset": preset, "job": kind, "params": params, "measured": measured,
            "disturbance_check": check, **more, "downloaded_at": now_utc()}


def result_header(page: LessonPage, kind: str, params: dict, result: Record | None,
                  event: JobEvent | None, what: str, **more) -> dict:
    """data_header for a chart drawn from one job's result (None while it runs: `what` names
    the unfinished job, "sweep" or "search")."""
    device = (event.device if event is not None and event.device else "") or \
        (getattr(result, "device", "") if result is not None else "")
    return data_header(
        page, kind, params, device=device,
        # a result measured at the teacher's endpoint names its model, not a preset
        preset=getattr(result, "preset", None) or getattr(result, "model", None)
        or params.get("preset", "tiny"),
        measured=origin_text(event) if result is not None else f"the {what} is in progress",
        check=check_text(result) if result is not None else f"the {what} has not finished",
        **more)


@dataclass
class Run:
    """One job a chart is drawn from: its kind and parameters as submitted, then its result and
    the result's event (None until it has come)."""

    kind: str
    params: dict
    result: Record | None = None
    event: JobEvent | None = None

    def done(self, result: Record, event: JobEvent | None) -> Run:
        self.result, self.event = result, event
        return self


def runs_header(page: LessonPage, runs: Mapping[str, Run], **more) -> dict:
    """data_header for a chart drawn from several jobs (a run per series, a point per setting),
    each named as the chart names it: its job and parameters, cached or fresh, and its check."""
    done = [run for run in runs.values() if run.result is not None]
    device = next((r.event.device for r in done if r.event is not None and r.event.device),
                  "") or next((getattr(r.result, "device", "") for r in done), "")
    presets = {getattr(r.result, "preset", None) or r.params.get("preset") for r in done}
    checks = {check_text(r.result) for r in done}
    return data_header(
        page, ", ".join(dict.fromkeys(r.kind for r in runs.values())),
        {name: r.params for name, r in runs.items()}, device=device,
        preset=", ".join(sorted(p for p in presets if p)) or "tiny",
        measured="; ".join(f"{name}: {origin_text(r.event) if r.result is not None else 'not measured yet'}"
                           for name, r in runs.items()) or "nothing yet",
        check=checks.pop() if len(checks) == 1 else
        "; ".join(f"{name}: {check_text(r.result)}" for name, r in runs.items()
                  if r.result is not None) or "nothing measured yet",
        **more)
