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
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

import panel as pn
import param

from engine.errors import ResultError
from engine.lab.results import DisturbanceCheck, Spread

from .a11y import LiveRegion
from .runtime.frame import once_per_frame
from .ticker import STATUS_TICKER

WRAP_CSS = "pre { white-space: pre-wrap; overflow-wrap: anywhere; overflow: visible; }"
SHOW_PROGRESS_AFTER_S = 1.0  # quick jobs finish without a bar flashing up
BAR_MAX = 1000
RANDOM_WEIGHTS = "random weights: timing only"


# ---- the words -------------------------------------------------------------------------------
def format_time(iso: str) -> str:
    """'2026-11-22T02:48:18+0000' -> '2026-11-22 02:48 UTC+00:00'; unparsable text as is."""
    try:
        when = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return iso
    return when.strftime("%Y-%m-%d %H:%M ") + (when.tzname() or "")


def describe_measurement(cached: bool, device: str, measured_at: str, how: str = "") -> str:
    """The provenance line under a measured number; `how` replaces "measured live" for a
    result not all measured live (a replay on measured costs says so, never "live")."""
    where = f"on {device}" if device else "on this machine"
    when = f" at {format_time(measured_at)}" if measured_at else ""
    if how:
        return f"cached: {how}, {where}{when}" if cached else f"{how}, {where}{when}"
    return f"cached: measured {where}{when}" if cached else f"measured live {where}{when}"


def spread_text(spread: Spread | None) -> str:
    """'decode steps p10-p90 2.10-2.40 ms (29 timed)': how steady the timed steps were."""
    if spread is None or not spread.count or spread.p10 is None:
        return ""
    plural = "s" if not spread.what.endswith("s") else ""
    return (f"{spread.what}{plural} p10\u2013p90 {_ms(spread.p10)}\u2013{_ms(spread.p90)} ms "
            f"({spread.count} timed)")


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def disturbed_text(check: DisturbanceCheck | None, remeasuring: bool = False) -> str:
    """Why a result is not to be trusted, or '' when it is."""
    if check is None or not check.disturbed:
        return ""
    why = check.reasons[0] if check.reasons else "other work ran beside it"
    then = ("re-measuring once the engine's core is quiet" if remeasuring else
            "not cached; measure again when the machine is quiet")
    return f"DISTURBED: {why}; {then}"


# A result measured on the plain path (before the engine's set-up built its kernels and timed its
# plans, or where they cannot be built): slower than the engine the lessons describe.
PLAIN_PATH = ("measured on the plain path (the engine's C++ kernels and plans not set up yet; "
              "see the About page)")


@dataclass(frozen=True)
class Measurement:
    """What the label says about one job's result: where it came from and how good it is."""

    cached: bool
    device: str
    measured_at: str
    spread: Spread | None = None
    check: DisturbanceCheck | None = None
    remeasuring: bool = False
    path: str = ""  # "plain": measured before the engine's set-up (engine.lab.setup_state)
    how: str = ""  # the result's `provenance` when not all of it was measured live

    @classmethod
    def of(cls, event) -> Measurement:
        """From a result event; a result without a readable spread or check has none."""
        data = event.data if isinstance(event.data, dict) else {}
        try:
            spread = Spread.from_dict(data["spread"]) if data.get("spread") else None
            check = DisturbanceCheck.from_dict(data["check"]) if data.get("check") else None
        except ResultError:
            spread = check = None
        try:
            how = getattr(event.result, "provenance", "") or ""
        except (AttributeError, ResultError, KeyError):
            how = ""
        return cls(event.cached, event.device, event.measured_at, spread, check,
                   getattr(event, "remeasuring", False), str(data.get("path") or ""), how)

    @property
    def disturbed(self) -> bool:
        return self.check is not None and self.check.disturbed


def describe_nearby(asked: dict, near: dict) -> str:
    """What a nearby result differs in: "batch_size 16 (you asked for 12)"; the settings the
    reader asked for, one by one, that the shown result was not measured with."""
    diffs = [f"{name} {_setting(near[name])} (you asked for {_setting(asked.get(name))})"
             for name in sorted(near) if near[name] != asked.get(name)]
    return ", ".join(diffs) or "the same settings"


def _setting(value) -> str:
    if isinstance(value, list):
        return "-".join(_setting(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def so_far_text(so_far: dict | None, stopped: bool = False) -> str:
    """A run's figure while it goes on (engine.lab.jobs.serving.SoFar), labelled as partial:
    'measured live so far: median end-to-end latency 143 ms over the 5 requests answered (the
    run goes on)'; '' before the first answer. stopped: the run was cut short after this figure
    and starts again in full (engine.lab.policy.at_first_figure)."""
    if not isinstance(so_far, dict) or not isinstance(so_far.get("e2e_p50_ms"), int | float):
        return ""
    answered = so_far.get("answered", 0)
    which = "the first request answered" if answered == 1 else \
        f"the {answered} requests answered"
    then = ("the run was stopped there for other readers and starts again in full after them"
            if stopped else "the run goes on")
    return (f"measured live so far: median end-to-end latency {so_far['e2e_p50_ms']:,.0f} ms "
            f"over {which} ({then})")


def queue_message(ahead: int, preempted: bool = False, resumes: bool = False) -> str:
    """Where a job waits: how many jobs of other readers the engine runs first (preempted: it
    was stopped for them and starts again; resumes: it was paused for them, a load test between
    two steps or its model's loading, and goes on where it stopped)."""
    if ahead <= 0:
        return "starting"
    jobs = f"{ahead} job{'s' if ahead != 1 else ''}"
    if resumes:
        return (f"paused for {jobs} of other readers, short measurements first; it goes on "
                "where it stopped after them")
    if preempted:
        return (f"paused for {jobs} of other readers, short measurements first; it starts "
                "again after them")
    return (f"queued behind {jobs} from other readers (the engine runs one at a time: short "
            "measurements first, readers in turn)")


def weights_text(weights: str | None) -> str:
    return RANDOM_WEIGHTS if weights == "random" else f"{weights or 'trained'} weights"


def provenance(result, event=None) -> str:
    """'tiny preset (trained weights) on cpu: <model> (2 cores)': what measured these numbers,
    from a result record that names its preset, weights and device (engine.lab.results); the
    device from the result event when it names one."""
    device = (event.device if event is not None and event.device else "") or \
        result.device or "this machine"
    return f"{result.preset} preset ({weights_text(result.weights)}) on {device}"


# ---- the panes -------------------------------------------------------------------------------
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
        disturbed = self._disturbed_line()
        return "; ".join(self._label_parts() + ([disturbed] if disturbed else []))

    def _label_parts(self) -> list[str]:
        results = list(self.results.values())
        cached = [r for r in results if r.cached]
        live = [r for r in results if not r.cached]
        several = len(results) > 1
        parts = []
        if live:
            line = describe_measurement(False, live[-1].device, live[-1].measured_at,
                                        live[-1].how)
            parts.append(f"{len(live)} {line}" if several else line)
        if cached:
            first = min(r.measured_at for r in cached)
            last = max(r.measured_at for r in cached)
            device = cached[-1].device
            how = cached[-1].how
            line = describe_measurement(True, device, first, how) if first == last else (
                f"cached: {how + ', ' if how else 'measured '}on {device or 'this machine'} at "
                f"{format_time(first)} to {format_time(last)}")
            parts.append(f"{len(cached)} {line}" if several else line)
        steady = spread_text(results[-1].spread) if results and not several else ""
        if steady:
            parts.append(steady)
        plain = [r for r in results if r.path == "plain"]
        if plain:
            count = f"{len(plain)} " if several else ""
            parts.append(f"{count}{PLAIN_PATH}")
        return parts

    def _disturbed_line(self) -> str:
        """'2 of 5 DISTURBED: why; what happens next', or '' when no result shown was disturbed."""
        results = list(self.results.values())
        disturbed = [r for r in results if r.disturbed]
        if not disturbed:
            return ""
        worst = disturbed[-1]
        count = f"{len(disturbed)} of {len(results)} " if len(results) > 1 else ""
        return count + disturbed_text(worst.check, worst.remeasuring)

    def _refresh_label(self) -> None:
        if not self.results:
            return
        results = list(self.results.values())
        cached = any(r.cached for r in results)
        live = not all(r.cached for r in results)
        css = "measurement-label cached" if cached and not live else "measurement-label live"
        text = html.escape("; ".join(self._label_parts()), quote=False)
        disturbed = self._disturbed_line()
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
