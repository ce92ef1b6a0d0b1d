"""What a page shows about an engine job besides its numbers: where the numbers came from (a
cached measurement or a fresh one, on which device, when), how far a slow job has got, and a
one-line message when the engine refused or failed.

Each piece takes the service's JobEvents (engine.service.JobEvent) on the session's own event
loop; `JobStatus` combines them so a lesson needs one line: `status.handle(event)`.
"""

from __future__ import annotations

import time
from datetime import datetime

import panel as pn
import param

SHOW_PROGRESS_AFTER_S = 1.0  # quick jobs finish without a bar flashing up


def format_time(iso: str) -> str:
    """'2026-11-22T02:48:18+0000' -> '2026-11-22 02:48 UTC+00:00'; unparsable text as is."""
    try:
        when = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return iso
    return when.strftime("%Y-%m-%d %H:%M ") + (when.tzname() or "")


def describe_measurement(cached: bool, device: str, measured_at: str) -> str:
    """The provenance line under a measured number."""
    where = f"on {device}" if device else "on this machine"
    when = f" at {format_time(measured_at)}" if measured_at else ""
    return f"cached: measured {where}{when}" if cached else f"measured live {where}{when}"


class CachedLabel(pn.viewable.Viewer):
    """"cached: measured on <device> at <time>", or "measured live ..." for a fresh result."""

    cached = param.Boolean(default=False, doc="The result came from the measurement cache.")
    device = param.String(default="", doc="The device that measured it.")
    measured_at = param.String(default="", doc="When it was measured (ISO 8601).")
    shown = param.Boolean(default=False, doc="Whether there is a result to describe yet.")

    def __init__(self, **params):
        super().__init__(**params)
        self._pane = pn.pane.HTML("", sizing_mode="stretch_width", visible=False,
                                  css_classes=["measurement-label"])
        self._refresh()

    @property
    def text(self) -> str:
        return describe_measurement(self.cached, self.device, self.measured_at) if self.shown else ""

    def update(self, event) -> None:
        """Take a result event's cached/device/measured_at."""
        self.param.update(cached=event.cached, device=event.device,
                          measured_at=event.measured_at, shown=True)

    @param.depends("cached", "device", "measured_at", "shown", watch=True)
    def _refresh(self) -> None:
        css = "measurement-label cached" if self.cached else "measurement-label live"
        self._pane.param.update(object=f'<span class="{css}">{self.text}</span>',
                                visible=self.shown)

    def __panel__(self):
        return self._pane


class EngineError(pn.viewable.Viewer):
    """The engine's one-line message when a job failed or was refused; hidden otherwise."""

    message = param.String(default="", doc="The one-line message; empty hides the pane.")

    def __init__(self, **params):
        super().__init__(**params)
        self._alert = pn.pane.Alert("", alert_type="danger", visible=False,
                                    sizing_mode="stretch_width")
        self._refresh()

    @param.depends("message", watch=True)
    def _refresh(self) -> None:
        text = self.message.splitlines()[0] if self.message else ""
        self._alert.param.update(object=f"The engine could not do this: {text}" if text else "",
                                 visible=bool(text))

    def __panel__(self):
        return self._alert


class JobProgress(pn.viewable.Viewer):
    """A progress bar and a line of text for a job that takes more than a second."""

    running = param.Boolean(default=False, doc="A job is queued or running.")
    done = param.Integer(default=0, bounds=(0, None), doc="Steps done.")
    total = param.Integer(default=0, bounds=(0, None), doc="Steps in all; 0 when unknown.")
    message = param.String(default="", doc="What the job is doing now.")

    def __init__(self, **params):
        super().__init__(**params)
        self._since: float | None = None
        self._bar = pn.indicators.Progress(value=-1, max=100, bar_color="info",
                                           sizing_mode="stretch_width", height=14)
        self._text = pn.pane.Str("", sizing_mode="stretch_width", css_classes=["job-progress"])
        self._layout = pn.Column(self._text, self._bar, visible=False,
                                 sizing_mode="stretch_width")
        self._callback = None

    def start(self, message: str = "") -> None:
        self.param.update(running=True, done=0, total=0, message=message)
        self._since = time.monotonic()
        self._start_timer()
        self.tick()

    def update(self, done: int, total: int, message: str | None = None) -> None:
        self.param.update(done=max(0, done), total=max(0, total),
                          message=self.message if message is None else message)
        self.tick()

    def stop(self) -> None:
        self.param.update(running=False, message="")
        self._since = None
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        self._layout.visible = False

    @property
    def shown(self) -> bool:
        return self._layout.visible

    def tick(self, now: float | None = None) -> None:
        """Show the bar once the job has taken SHOW_PROGRESS_AFTER_S; refresh its value."""
        if not self.running or self._since is None:
            return
        now = time.monotonic() if now is None else now
        elapsed = now - self._since
        if self.total:
            self._bar.value = int(100 * min(self.done, self.total) / self.total)
            text = f"{self.message or 'measuring'}: {self.done} of {self.total} steps"
        else:
            self._bar.value = -1  # indeterminate
            text = self.message or "working"
        self._text.object = f"{text} ({elapsed:.0f} s)"
        if elapsed >= SHOW_PROGRESS_AFTER_S:
            self._layout.visible = True

    def _start_timer(self) -> None:
        if self._callback is None and pn.state.curdoc is not None \
                and pn.state.curdoc.session_context is not None:
            self._callback = pn.state.add_periodic_callback(self.tick, period=250)

    def __panel__(self):
        return self._layout


class JobStatus(pn.viewable.Viewer):
    """Progress, provenance and errors of one demo's jobs, fed with `handle(event)`."""

    def __init__(self, **params):
        super().__init__(**params)
        self.progress = JobProgress()
        self.label = CachedLabel()
        self.error = EngineError()
        self._layout = pn.Column(self.progress, self.error, self.label,
                                 sizing_mode="stretch_width")

    def handle(self, event) -> None:
        """Update from one engine.service.JobEvent."""
        kind = event.type
        if kind == "queued":
            self.error.message = ""
            ahead = event.data.get("ahead", 0)
            self.progress.start(f"waiting for {ahead} job{'s' if ahead != 1 else ''} ahead"
                                if ahead else "starting")
        elif kind == "started":
            self.progress.update(0, 0, "measuring")
        elif kind == "progress":
            self.progress.update(event.data.get("done", 0), event.data.get("total", 0),
                                 event.data.get("message", "measuring"))
        elif kind == "result":
            self.progress.stop()
            self.label.update(event)
        elif kind == "error":
            self.progress.stop()
            self.error.message = event.data.get("message", "unknown error")
        elif kind == "cancelled":
            self.progress.stop()

    def __panel__(self):
        return self._layout
