"""What a page shows about its engine jobs besides their numbers: how far they have got (after a
second), where they wait in the engine's queue, where the numbers came from (a cached measurement
or a fresh one, on which device, when), how steady and how trustworthy they are (the spread of
what was timed; "disturbed" when other work took the engine's core while it measured, with the
"re-measuring" state while the engine measures it again on a quiet machine), and a one-line
message when the engine refused or failed.

One widget for a group of jobs, a single job being a group of one (lessons.runner.JobRunner feeds
it): `start(total)` begins a group, `add()` grows it, `forget()` drops a job the page cancelled,
`handle(event)` takes any of the group's engine JobEvents on the session's own loop,
`job_progress(done, total, message)` reports progress a job does not send itself (tokens drawn,
requests finished), and `queued(ahead)` says how many other readers' jobs run first. A group of
one reads "measuring: 3 of 31 steps (2 s)"; a larger group "4 of 11 measurements done (now:
...), 6 s".

For screen readers it announces, through a polite live region (widgets.a11y.LiveRegion,
throttled: the latest of a burst), the engine's errors, the queue position when it changes, and
the group's provenance line when it finishes (so a state added to that line, such as a disturbed
or cached result, is read with it). A page adds what was measured, in words, with
`status.announce("batch 16 measured: 2,296 tokens/s, 6.97 ms per token")`: one message per
result, never one per token.

What it says is widgets/job_text.py's (pure functions of the engine's records); this module
places the words, the bar and the live region on the page and keeps them current.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from functools import partial

import panel as pn
import param

from .a11y import LiveRegion
from .job_text import RANDOM_WEIGHTS as RANDOM_WEIGHTS  # pages name it from here too
from .job_text import (
    Measurement,
    describe_measurement,
    describe_nearby,
    disturbed_line,
    label_parts,
    queue_message,
    so_far_text,
)
from .job_text import format_time as format_time  # pages name it from here too
from .job_text import provenance as provenance  # pages name it from here too
from .runtime.frame import once_per_frame
from .ticker import STATUS_TICKER

WRAP_CSS = "pre { white-space: pre-wrap; overflow-wrap: anywhere; overflow: visible; }"
SHOW_PROGRESS_AFTER_S = 1.0  # quick jobs finish without a bar flashing up
BAR_MAX = 1000


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


class JobStatus(pn.viewable.Viewer):
    """Progress, queue position, provenance and errors of a group of engine jobs."""

    total = param.Integer(default=0, bounds=(0, None), doc="Jobs in the group.")
    finished = param.Integer(default=0, bounds=(0, None),
                             doc="Jobs with a result, an error or cancelled.")
    running = param.Boolean(default=False, doc="Some job of the group has not finished.")
    message = param.String(default="", doc="What the group is doing now.")
    done = param.Integer(default=0, bounds=(0, None), doc="Steps the running job has done.")
    steps = param.Integer(default=0, bounds=(0, None),
                          doc="Steps the running job has in all; 0 when unknown.")

    def __init__(self, what: str = "measurements", **params):
        super().__init__(**params)
        self.what = what  # what the jobs are, in the plural: "measurements", "runs"
        self.results: dict[int, Measurement] = {}  # by job id: the latest result of each
        self.so_far = ""  # the running job's partial figure (so_far_text), until its result
        self._so_far_data: dict | None = None  # what so_far says, as the engine sent it
        self._stopped = False  # the run was cut short after so_far: kept until a new figure
        self._since: float | None = None
        self._watch: int | None = None  # on the process's clock while the group runs
        self._bar = pn.indicators.Progress(value=-1, max=BAR_MAX, bar_color="info", height=14,
                                           sizing_mode="stretch_width")
        # wrapped, never scrolled: a long message ("re-measuring: waiting for the engine's
        # cores...") would otherwise make a scrollable <pre> that a keyboard cannot reach (axe)
        self._text = pn.pane.Str("", sizing_mode="stretch_width", css_classes=["job-progress"],
                                 stylesheets=[WRAP_CSS])
        self._progress = pn.Column(self._text, self._bar, visible=False,
                                   sizing_mode="stretch_width")
        self.error = EngineError()
        self._page_error = pn.pane.Alert("", alert_type="warning", visible=False,
                                         sizing_mode="stretch_width")
        self._label = pn.pane.HTML("", visible=False, sizing_mode="stretch_width",
                                   css_classes=["measurement-label"])
        self.live = LiveRegion()
        self.error.param.watch(self._announce_error, "message")
        self._layout = pn.Column(self._progress, self.error, self._page_error, self._label,
                                 self.live,
                                 sizing_mode="stretch_width")

    # ---- the group -------------------------------------------------------------------------------
    def start(self, total: int = 1, message: str = "starting") -> None:
        """A new group of `total` jobs (forgets the previous group's provenance and error)."""
        self.results = {}
        self.so_far, self._so_far_data, self._stopped = "", None, False
        self.error.message = ""
        self._page_error.visible = False
        self.param.update(total=total, finished=0, running=total > 0, message=message, done=0,
                          steps=0)
        self._since = time.monotonic()
        self._label.param.update(object="", visible=False)
        if total > 0:
            self._start_timer()
        self.tick()

    def add(self, count: int = 1) -> None:
        """More jobs join the group; a new group when none is running."""
        if not self.running:
            self.start(count)
        else:
            self.total += count
            self.tick()

    def forget(self, count: int = 1) -> None:
        """Jobs the page cancelled leave the group unfinished (their events are not coming)."""
        self.total = max(self.finished, self.total - count)
        if self.running and self.finished >= self.total:
            self.stop()

    def handle(self, event) -> None:
        """Take one engine.lab.events.JobEvent of any job in the group."""
        kind = event.type
        if kind == "started":
            self.job_progress(0, 0, "measuring")
        elif kind == "progress":
            text = so_far_text(event.data.get("so_far"))
            if "so_far" in event.data and (text or not self._stopped):
                # a run started again keeps its first part's figure until it has its own
                self.so_far, self._so_far_data, self._stopped = text, event.data["so_far"], False
            self.job_progress(event.data.get("done", 0), event.data.get("total", 0),
                              event.data.get("message"))
        elif kind == "result":
            self.so_far, self._so_far_data, self._stopped = "", None, False
            self.results[event.job_id] = measurement = Measurement.of(event)
            if measurement.remeasuring:  # disturbed: the engine measures it again
                self.job_progress(0, 0, "re-measuring: other work ran on the engine's core "
                                        "while it measured; waiting for a quiet machine")
                self._refresh_label()
            else:
                self._finish_one()
        elif kind == "error":
            self.error.message = event.data.get("message", "unknown error")
            self._finish_one()
        elif kind == "cancelled":
            self._finish_one()

    def job_progress(self, done: int, total: int, message: str | None = None) -> None:
        """The running job's own progress: done of total steps (total 0: unknown)."""
        self.param.update(done=max(0, done), steps=max(0, total),
                          message=self.message if message is None else message)
        once_per_frame((id(self), "tick"), self.tick)  # a frame's many progress events: once

    def nearby(self, event, asked: dict) -> None:
        """A cached result of nearby settings is shown while the asked-for one waits."""
        if self.results:
            return  # a result of the group is shown already: the label says whence
        where = describe_measurement(True, event.device, event.measured_at)
        self._label.param.update(object=(
            f'<span class="measurement-label nearby">nearby: a result of '
            f"{html.escape(describe_nearby(asked, event.near or {}))}, {html.escape(where)}; "
            "shown until yours is measured</span>"), visible=True)

    def page_failed(self, error: BaseException) -> None:
        """The page's own code failed on an engine event: say so instead of spinning on."""
        text = (f"This page could not show what the engine sent ({type(error).__name__}). Try "
                "again or reload the page; the server's log has the details.")
        self._page_error.param.update(object=text, visible=True)
        self.announce(text)

    @property
    def page_error_text(self) -> str:
        return self._page_error.object if self._page_error.visible else ""

    def queued(self, ahead: int, preempted: bool = False, resumes: bool = False) -> None:
        """The group waits behind `ahead` jobs of other readers (again, if preempted; with its
        model's loading paused, if resumes)."""
        message = queue_message(ahead, preempted, resumes)
        if preempted and not resumes and self.so_far:  # cut short: its figure stays, so labelled
            self._stopped = True
            self.so_far = so_far_text(self._so_far_data, stopped=True)
        if ahead > 0 and message != self.message:
            self.announce(message[0].upper() + message[1:] + ".")
        self.message = message
        self.tick()

    def announce(self, text: str) -> None:
        """Have screen readers say `text` (politely, throttled): a measurement in words."""
        self.live.announce(text)

    def _announce_error(self, event) -> None:
        if event.new:
            self.announce(f"The engine could not do this: {event.new.splitlines()[0]}")

    def stop(self) -> None:
        self.param.update(running=False, message="")
        self._since = None
        STATUS_TICKER.unwatch(self._watch)
        self._watch = None
        self._progress.visible = False

    def _finish_one(self) -> None:
        self.param.update(finished=min(self.total, self.finished + 1), done=0, steps=0)
        if self.finished >= self.total:
            self.stop()
        else:
            self.tick()
        self._refresh_label()
        if self.finished >= self.total and self.results:
            self.announce(f"{self.what[0].upper()}{self.what[1:]} done: {self.label_line}.")

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
        """Show the bar once the group has taken SHOW_PROGRESS_AFTER_S; refresh its value."""
        if not self.running or self._since is None:
            return
        text, value, show = self._view(now)
        self._bar.value = value
        self._text.object = text
        if show:
            self._progress.visible = True

    def _view(self, now: float | None = None) -> tuple[str, int, bool]:
        """(the progress line, the bar's value, whether the bar is due) at `now`."""
        now = time.monotonic() if now is None else now
        elapsed = max(0.0, now - self._since)  # a new group may have started since `now`
        fraction = min(self.done, self.steps) / self.steps if self.steps else 0.0
        if self.total > 1:
            value = int(BAR_MAX * (self.finished + fraction) / self.total)
            now_doing = f" (now: {self.message})" if self.message else ""
            text = f"{self.finished} of {self.total} {self.what} done{now_doing}, {elapsed:.0f} s"
        elif self.steps:
            value = int(BAR_MAX * fraction)
            text = (f"{self.message or 'measuring'}: {self.done} of {self.steps} steps "
                    f"({elapsed:.0f} s)")
        else:
            value = -1  # indeterminate
            text = f"{self.message or 'working'} ({elapsed:.0f} s)"
        text = f"{text}; {self.so_far}" if self.so_far else text
        return text, value, elapsed >= SHOW_PROGRESS_AFTER_S

    def _due(self, now: float) -> Callable[[], None] | None:
        """For the process's clock (widgets.ticker): this status's tick when it would change
        what the page shows (the seconds, once a second), None when it would not."""
        if not self.running or self._since is None:
            return None
        text, value, show = self._view(now)
        if (text == self._text.object and value == self._bar.value
                and (self._progress.visible or not show)):
            return None
        return partial(self.tick, now)

    @property
    def label_line(self) -> str:
        """The provenance line as plain text ("" before any result), with the disturbance verdict
        when a result was disturbed (so the live region reads it too)."""
        results = list(self.results.values())
        disturbed = disturbed_line(results)
        return "; ".join(label_parts(results) + ([disturbed] if disturbed else []))

    def _refresh_label(self) -> None:
        if not self.results:
            return
        results = list(self.results.values())
        cached = any(r.cached for r in results)
        live = not all(r.cached for r in results)
        css = "measurement-label cached" if cached and not live else "measurement-label live"
        text = html.escape("; ".join(label_parts(results)), quote=False)
        disturbed = disturbed_line(results)
        if disturbed:
            text += f'<br><span class="disturbed">{html.escape(disturbed, quote=False)}</span>'
            css += " disturbed"
        self._label.param.update(object=f'<span class="{css}">{text}</span>', visible=True)

    @property
    def disturbed(self) -> bool:
        """Some result shown now was disturbed (and not yet measured again)."""
        return any(r.disturbed for r in self.results.values())

    @property
    def remeasuring(self) -> bool:
        return any(r.remeasuring for r in self.results.values())

    def _start_timer(self) -> None:
        """The seconds go on while the group runs: one clock for every page (widgets.ticker),
        which calls tick only when the line would change, not a timer of this page's own."""
        doc = pn.state.curdoc
        if self._watch is None and doc is not None and doc.session_context is not None:
            self._watch = STATUS_TICKER.watch(doc, self._due)

    def __panel__(self):
        return self._layout
