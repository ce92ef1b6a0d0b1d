"""Progress, provenance and errors of a demo that runs several engine jobs at once (a roofline's
dozen points, two serving runs to compare).

`start(n)` begins a batch of n jobs; `handle(event)` takes any of their engine.service.JobEvents;
`job_progress(done, total, message)` reports progress a job does not send itself (a serving run
that streams steps). The bar appears once the batch has taken a second, and says how many of the
jobs are done; the label says which results came from the cache and which were measured now, on
which device, and when; a failed job's one-line message shows in an alert.
"""

from __future__ import annotations

import time

import panel as pn
import param

from .job_status import SHOW_PROGRESS_AFTER_S, EngineError, describe_measurement, format_time


class BatchStatus(pn.viewable.Viewer):
    """The status line of a batch of engine jobs."""

    total = param.Integer(default=0, bounds=(0, None), doc="Jobs in the batch.")
    finished = param.Integer(default=0, bounds=(0, None), doc="Jobs with a result, an error or "
                             "cancelled.")
    running = param.Boolean(default=False, doc="Some job of the batch has not finished.")
    message = param.String(default="", doc="What the batch is doing now.")

    def __init__(self, what: str = "measurements", **params):
        super().__init__(**params)
        self.what = what
        self.results: list[tuple[bool, str, str]] = []  # (cached, device, measured_at)
        self._fraction = 0.0  # of the running job, from its progress
        self._since: float | None = None
        self._callback = None
        self._bar = pn.indicators.Progress(value=-1, max=1000, bar_color="info", height=14,
                                           sizing_mode="stretch_width")
        self._text = pn.pane.Str("", sizing_mode="stretch_width", css_classes=["job-progress"])
        self._progress = pn.Column(self._text, self._bar, visible=False,
                                   sizing_mode="stretch_width")
        self.error = EngineError()
        self._label = pn.pane.HTML("", visible=False, sizing_mode="stretch_width",
                                   css_classes=["measurement-label"])
        self._layout = pn.Column(self._progress, self.error, self._label,
                                 sizing_mode="stretch_width")

    # ---- the batch -------------------------------------------------------------------------------
    def start(self, total: int, message: str = "") -> None:
        """A new batch of `total` jobs (forgets the previous batch's provenance and error)."""
        self.results = []
        self._fraction = 0.0
        self.error.message = ""
        self.param.update(total=total, finished=0, running=total > 0, message=message)
        self._since = time.monotonic()
        self._label.param.update(object="", visible=False)
        if total > 0:
            self._start_timer()
        self.tick()

    def handle(self, event) -> None:
        """Take one JobEvent of any job in the batch."""
        kind = event.type
        if kind == "progress":
            total = event.data.get("total", 0)
            self.job_progress(event.data.get("done", 0), total, event.data.get("message"))
        elif kind == "result":
            self.results.append((event.cached, event.device, event.measured_at))
            self._finish_one()
        elif kind == "error":
            self.error.message = event.data.get("message", "unknown error")
            self._finish_one()
        elif kind == "cancelled":
            self._finish_one()

    def job_progress(self, done: int, total: int, message: str | None = None) -> None:
        """The running job's own progress: done of total (0 total: unknown)."""
        self._fraction = min(1.0, done / total) if total else 0.0
        if message is not None:
            self.message = message
        self.tick()

    def _finish_one(self) -> None:
        self._fraction = 0.0
        self.finished = min(self.total, self.finished + 1)
        if self.finished >= self.total:
            self.stop()
        else:
            self.tick()
        self._refresh_label()

    def stop(self) -> None:
        self.running = False
        self._since = None
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        self._progress.visible = False

    # ---- drawing ---------------------------------------------------------------------------------
    @property
    def shown(self) -> bool:
        return self._progress.visible

    @property
    def progress_text(self) -> str:
        return self._text.object

    @property
    def label_text(self) -> str:
        return self._label.object if self._label.visible else ""

    def tick(self, now: float | None = None) -> None:
        if not self.running or self._since is None:
            return
        now = time.monotonic() if now is None else now
        elapsed = now - self._since
        done = self.finished + self._fraction
        self._bar.value = int(1000 * done / self.total) if self.total else -1
        now_doing = f" (now: {self.message})" if self.message else ""
        self._text.object = (f"{self.finished} of {self.total} {self.what} done{now_doing}, "
                             f"{elapsed:.0f} s")
        if elapsed >= SHOW_PROGRESS_AFTER_S:
            self._progress.visible = True

    def _refresh_label(self) -> None:
        if not self.results:
            return
        cached = [r for r in self.results if r[0]]
        live = [r for r in self.results if not r[0]]
        parts = []
        if live:
            parts.append(f"{len(live)} {describe_measurement(False, live[-1][1], live[-1][2])}"
                         if len(self.results) > 1 else
                         describe_measurement(False, live[-1][1], live[-1][2]))
        if cached:
            when = sorted(r[2] for r in cached)
            span = format_time(when[0]) if when[0] == when[-1] else \
                f"{format_time(when[0])} to {format_time(when[-1])}"
            device = cached[-1][1] or "this machine"
            parts.append(f"{len(cached) if len(self.results) > 1 else ''} cached: measured on "
                         f"{device} at {span}".strip())
        css = "measurement-label cached" if cached and not live else "measurement-label live"
        self._label.param.update(object=f'<span class="{css}">{"; ".join(parts)}</span>',
                                 visible=True)

    def _start_timer(self) -> None:
        if self._callback is None and pn.state.curdoc is not None \
                and pn.state.curdoc.session_context is not None:
            self._callback = pn.state.add_periodic_callback(self.tick, period=250)

    def __panel__(self):
        return self._layout
