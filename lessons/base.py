"""The base of every page that measures (lessons.base.Page), of every page whose controls a URL
can set (UrlPage), and of every lesson (LessonPage).

A lesson is a `LessonPage` subclass in its own module (see lessons.registry). Its words are data,
module-level constants beside its prose, and the class binds them and holds the behaviour:

    OBJECTIVES = ("read ...", "explain ...", "pick ...")        # "You will be able to ..."
    PREDICTION = PredictionQuestion("Going from batch 1 to 8, total tokens/s will ...",
                                    ("6 to 8 times as many", "3 to 6 times", "under 3 times"))
    TAKEAWAY = check_takeaway(("the finding", "why", "what to do about it"))   # three lines
    INSTRUCTOR = InstructorNotes(minutes=15, timing=..., misconceptions=(...), prompts=(...))
    QUESTIONS = (Question(...), ...,                            # choices shuffled per reader
                 MeasuredQuestion("doubling", "Measure batch 1 to 8: a question appears here."))

    def gpu_finding(machines) -> str: ...     # the "On a GPU" box's part (lessons.on_a_gpu)

    class KnobLesson(LessonPage):
        slug = "knob"
        objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
        instructor, questions = INSTRUCTOR, QUESTIONS
        batch_size = param.Integer(default=8, bounds=(1, 64), label="Batch size")

        def __init__(self, **params):
            super().__init__(**params)
            self.gpu_box = GpuBox(gpu_finding)
        def body(self):           # the demo and its prose, built once: place
            ...                   # self.prediction_box above the demo, self.runner.status,
                                  # self.gpu_box where the finding is discussed
        def start(self):          # once the page is on the reader's screen: measure
            self.gpu_box.fetch(self.jobs)
            self.runner.submit("sweep_point", {...}, self.on_event)
        def on_event(self, event):   # event.result is the job's typed record: draw it, then
            self.prediction_box.reveal(choice, "the numbers")   # what it says of the prediction
            self.checkpoint.provide("doubling", doubling_question(points))   # your numbers
        def default_jobs(self):   # {label: (kind, params)} of the default view: the cache
            ...                   # warmer's warm_jobs() and the instructor page's numbers
        def expected_lines(self, label, kind, cached):   # those numbers, for one cached job
            return [f"{label}: TPOT {cached.result.tpot_ms:.1f} ms"]

A new lesson also registers in lessons.registry; tests/lessons/test_lesson_content.py then holds
it to this pattern (objectives, prediction, takeaway, notes, a measured question, shuffled keys).

Predict first: while the reader has neither predicted nor skipped, the runner parks every job,
those the measurement cache can answer too (the status then says a result is ready), and sends
them the moment the prediction is made: no answer is on the page before the reader commits, and
a cached one is drawn at once after. The page draws, around body(): the title and what
it measures, the objectives, the URL's notices, then the takeaway, the checkpoint (one seed per
reader: lessons.reader_seed) and the links to the lessons before and after. Headings are HTML,
one h1 per page and h2 for its sections.

It may list the engine jobs its default view runs in `warm_jobs()`, for the cache warmer.
It gets: its title and one-line summary from the registry, its parameters set from the URL
(/app?lesson=knob&batch_size=16, out-of-range values clamped with a visible notice) and kept in
the URL as the reader moves them, `self.runner` (lessons.job_runner.JobRunner) to run engine jobs
with events on this session's loop and its status widget, `start()` called once when the page has
loaded (`self.started` is False until then, so parameters set from the URL measure nothing).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import panel as pn

from widgets.a11y import plain_words
from widgets.checkpoint import Checkpoint, MeasuredQuestion, Question
from widgets.html import html_pane
from widgets.job_status import JobStatus, format_time
from widgets.prediction import PredictionBox, PredictionQuestion

from .classroom.recording import Recorder
from .job_runner import JobRunner
from .reader_seed import reader_seed
from .registry import LessonInfo, lesson_info, neighbours
from .session_jobs import SessionJobs
from .teaching import Cached, InstructorNotes, Lookup, cached_lines
from .url_state import apply_query_args

log = logging.getLogger(__name__)


def when_measured(label: str, kind: str, cached: Cached) -> list[str]:
    """An instructor page's line for a cached job: where and when it was measured."""
    return [f"{label}: measured on {cached.device} at {format_time(cached.measured_at)}"]

# Query arguments that choose the page; no page parameter may be called this.
RESERVED_QUERY_ARGS = frozenset({"lesson", "page", "embed"})


class Page(pn.viewable.Viewer):
    """A page that measures: its layout built once, when it is first drawn; its engine jobs run
    by one JobRunner and shown by its JobStatus; `start()` once the reader has the page."""

    job_noun: ClassVar[str] = "measurements"  # what the page's jobs are, for its status line
    # The page draws a cached result of nearby settings while its own waits ("nearby" events).
    shows_nearby: ClassVar[bool] = False

    def __init__(self, **params: Any):
        super().__init__(**params)
        self._jobs: SessionJobs | None = None
        self._view: pn.viewable.Viewable | None = None
        self.started = False
        self.runner = JobRunner(self, JobStatus(self.job_noun), nearby=self.shows_nearby)

    @property
    def jobs(self) -> SessionJobs:
        """This session's engine jobs (tests give a page a SessionJobs of their own)."""
        if self._jobs is None:
            self._jobs = SessionJobs.for_session()
        return self._jobs

    # ---- drawing and starting --------------------------------------------------------------------
    def view(self) -> pn.viewable.Viewable:
        """The page's layout; called once, when the page is first drawn."""
        raise NotImplementedError

    def start(self) -> None:
        """What the page does once the reader has it, typically measuring what its default view
        shows; nothing by default. Called once: when the served page has loaded in the browser
        (not while the URL's values are being applied), or at once when the page is first drawn
        outside a server (tests, scripts)."""

    def __panel__(self) -> pn.viewable.Viewable:
        if self._view is None:
            self._view = self.view()
            if self.jobs.served:
                pn.state.onload(self._start_once)
            else:
                self._start_once()
        return self._view

    def say(self, words: str) -> None:
        """Have screen readers read what was just measured, in one sentence (Markdown or HTML
        marks dropped), through the status widget's polite, throttled live region: once per
        result, never per token."""
        self.runner.status.announce(plain_words(words))

    def _start_once(self) -> None:
        if not self.started:
            self.started = True
            try:
                self.start()
            except Exception as e:  # the page's own bug: a message on it, not a silent page
                log.exception("starting %s failed", type(self).__name__)
                self.runner.status.stop()
                self.runner.status.page_failed(e)


class UrlPage(Page):
    """A page whose param parameters the URL's query sets and follows."""

    url_params: ClassVar[tuple[str, ...] | None] = None  # None: see url_parameter_names

    def __init__(self, **params: Any):
        clash = RESERVED_QUERY_ARGS & set(type(self).param)
        if clash:
            raise TypeError(f"{type(self).__name__}: parameter name {sorted(clash)[0]!r} is "
                            "reserved for choosing the page in the URL; rename it")
        super().__init__(**params)
        self._notices: list[str] = []
        self._notice_pane = pn.pane.Alert("", alert_type="warning", visible=False,
                                          sizing_mode="stretch_width")

    # ---- the URL ---------------------------------------------------------------------------
    @classmethod
    def url_parameter_names(cls) -> list[str]:
        """The parameters a URL may set: `url_params`, or every one a reader could change
        (not `name`, not constant or read-only, not hidden by a negative precedence)."""
        if cls.url_params is not None:
            return [n for n in cls.url_params if n != "name"]
        return [n for n, p in cls.param.objects("existing").items()
                if n != "name" and not p.constant and not p.readonly
                and (p.precedence is None or p.precedence >= 0)]

    @classmethod
    def from_url(cls, args: Mapping[str, Any] | None = None, sync: bool = True, **params: Any):
        """A page with its parameters set from the query args (the session's by default)."""
        page = cls(**params)
        if args is None:
            args = pn.state.session_args if pn.state.curdoc is not None else {}
        page.show_notices(apply_query_args(page, args, cls.url_parameter_names()))
        if sync:
            page.sync_url()
        return page

    def sync_url(self) -> None:
        """Keep the address bar showing the current settings, so a copied link reopens them.
        Starts once the page has loaded: only then does the server know the browser's URL,
        and the clamped values can replace what the link asked for."""
        doc = pn.state.curdoc
        if pn.state.location is None or doc is None or doc.session_context is None:
            return
        if self.url_parameter_names():
            pn.state.onload(self._start_url_sync)

    def _start_url_sync(self) -> None:
        names = self.url_parameter_names()
        pn.state.location.sync(self, {n: n for n in names}, on_error=self._url_error)

    def _url_error(self, values: dict) -> None:
        """The URL changed to values that do not fit (the back button, an edited address)."""
        args = {k: v if isinstance(v, str) else str(v) for k, v in values.items()}
        self.show_notices(apply_query_args(self, args, self.url_parameter_names()))

    @property
    def notices(self) -> list[str]:
        """What the page says about the URL's values it had to change or refuse."""
        return list(self._notices)

    def show_notices(self, notices: list[str]) -> None:
        for notice in notices:
            if notice not in self._notices:
                self._notices.append(notice)
        self._notice_pane.param.update(object="\n\n".join(self._notices),
                                       visible=bool(self._notices))


class LessonPage(UrlPage):
    """A lesson: header (number, title, what it measures, objectives), URL notices, body(),
    takeaway, checkpoint, and links to the lessons before and after it (module docstring)."""

    slug: ClassVar[str] = ""
    objectives: ClassVar[tuple[str, ...]] = ()
    prediction: ClassVar[PredictionQuestion | None] = None
    takeaway: ClassVar[tuple[str, ...]] = ()
    instructor: ClassVar[InstructorNotes | None] = None
    questions: ClassVar[tuple[Question | MeasuredQuestion, ...]] = ()

    def __init__(self, **params: Any):
        super().__init__(**params)
        info = lesson_info(self.slug)
        if info is None:
            raise TypeError(f"{type(self).__name__}.slug {self.slug!r} is not in lessons.registry")
        self.info: LessonInfo = info
        self.checkpoint = Checkpoint(self.questions, seed=reader_seed())
        self.prediction_box: PredictionBox | None = None
        if self.prediction is not None:
            self.prediction_box = PredictionBox(self.prediction)
            self.runner.hold_fresh(lambda: not self.prediction_box.made, cached_too=True)
            self.prediction_box.param.watch(self._predicted, "made")
        self.recorder = Recorder.attach(self)  # the class's records (lessons.classroom)

    def _predicted(self, event) -> None:
        if event.new:
            self.runner.release()

    @property
    def title(self) -> str:
        return self.info.title

    @property
    def summary(self) -> str:
        return self.info.measures

    def body(self) -> list:
        """The lesson's prose and demo; the default says it is still being written."""
        return [html_pane(
            '<p class="placeholder">This lesson\'s live demo is being written. Meanwhile the '
            '<a href="app">course map</a> and the <a href="app?page=vocabulary">vocabulary</a> '
            "are ready.</p>")]

    def export_run(self) -> None:
        """For a static copy (lessons.export), after start(): measure what the page would show
        once the reader acts, where start() measures nothing by itself (lesson 1 streams the
        reader's prompt only on the button). Nothing by default."""

    def static_swaps(self) -> list[tuple[pn.viewable.Viewable, pn.viewable.Viewable]]:
        """For a static copy, once its measurements are in: (part, what replaces it) for the
        parts that only a live session can fill (lesson 1's browser clock times a stream that
        no browser receives from a file), so a copy says why instead of showing empty
        readouts. None by default."""
        return []

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        """The engine jobs (kind, params) this lesson's default view shows, by a label for the
        instructor page. A lesson that lists them here and says what a result means in
        expected_lines() gets warm_jobs() and expected_numbers() from them; none by default."""
        return {}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        """The instructor page's lines for one cached job of default_jobs(): by default, when and
        where it was measured."""
        return when_measured(label, kind, cached)

    @classmethod
    def _lists_default_jobs(cls) -> bool:
        # A lesson without default_jobs() is not built just to learn that it has none.
        return cls.default_jobs is not LessonPage.default_jobs

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        """The engine jobs (kind, params) this lesson shows by default, so that
        `python -m lessons.warm` can measure them before a class: default_jobs()' by default."""
        return list(cls().default_jobs().values()) if cls._lists_default_jobs() else []

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        """Lines for the instructor page: what this machine gave for the lesson's default view,
        from the measurement cache (`lookup(kind, params)` gives a lessons.teaching.Cached or
        None): by default expected_lines() of each cached job of default_jobs() (of warm_jobs(),
        labelled by kind, for a lesson that lists only those); [] when none is cached."""
        if not cls._lists_default_jobs():
            return cached_lines([(kind, (kind, params)) for kind, params in cls.warm_jobs()],
                                lookup, when_measured)
        page = cls()
        return cached_lines(page.default_jobs().items(), lookup, page.expected_lines)

    def header(self) -> pn.viewable.Viewable:
        goals = "".join(f"<li>{html.escape(goal)}</li>" for goal in self.objectives)
        objectives = (f'<section class="objectives"><h2>You will be able to</h2><ul>{goals}'
                      "</ul></section>" if goals else "")
        return html_pane(
            f"<h1>Lesson {self.info.number}: {html.escape(self.title)}</h1>"
            f'<p class="measures"><strong>What it measures:</strong> '
            f"{html.escape(self.summary)}</p>{objectives}", css_classes=["lesson-header"])

    def takeaway_pane(self) -> pn.viewable.Viewable | None:
        if not self.takeaway:
            return None
        lines = "".join(f"<li>{html.escape(line)}</li>" for line in self.takeaway)
        return html_pane(
            f'<section class="takeaway"><h2>Takeaway</h2><ol>{lines}</ol><p class="more">'
            'Every lesson\'s takeaway on one printable page: <a href="app?page=summary">the '
            "course summary</a>.</p></section>", css_classes=["lesson-takeaway"])

    def footer(self) -> pn.viewable.Viewable:
        before, after = neighbours(self.slug)
        links = ['<a href="app">Course map</a>']
        if before:
            links.insert(0, f'<a href="{before.url}">&larr; Lesson {before.number}: '
                            f"{html.escape(before.title)}</a>")
        if after:
            links.append(f'<a href="{after.url}">Lesson {after.number}: '
                         f"{html.escape(after.title)} &rarr;</a>")
        return html_pane(f'<nav class="lesson-links" aria-label="Lessons">'
                         f'{" &nbsp;|&nbsp; ".join(links)}</nav>',
                         css_classes=["lesson-footer"])

    def show_notices(self, notices: list[str]) -> None:
        super().show_notices(notices)
        layout = self._view
        if self._notice_pane.visible and layout is not None and self._notice_pane not in layout:
            layout.insert(1, self._notice_pane)  # under the header, where view() puts it

    def view(self) -> pn.viewable.Viewable:
        # The URL's notices only when there are some: a hidden pane costs a page build as much
        # as a shown one (its models made and sent), and nearly every reader's URL is fine.
        notices = [self._notice_pane] if self._notice_pane.visible else []
        parts = [self.header(), *notices, *self.body(), self.takeaway_pane()]
        if self.questions:
            parts.append(self.checkpoint)
        parts.append(self.footer())
        return pn.Column(*[p for p in parts if p is not None], sizing_mode="stretch_width",
                         css_classes=["lesson", f"lesson-{self.slug}"])
