"""A static copy of lessons for course sites that cannot run a server:
`python -m lessons.export --lesson knob --out site/` (or `--all` for every lesson and an index).
A lesson's view can be set as its URL sets it: `--lesson 'knob?batch_size=16'`.

Each lesson page is built as the app builds it and its default view is filled through an engine
service of this command's own: a result recorded in the measurement cache (cache_dir()/results,
what `python -m lessons.warm` and the app write) is used as it is, one missing is measured now and
recorded there. The page is then saved as one HTML file with Bokeh's and Panel's JavaScript
inline, so it opens from disk with no server and fetches nothing. What needs the server cannot
work in a file: the sliders and buttons stay, showing how they were set, but disabled, and a banner
at the top says so and names the device and the time of the measurements. The prediction and the
checkpoint become plain HTML whose feedback a CSS rule shows on a pick (widgets.static_choice), and
the chart data downloads carry their files inside the page. Links between lessons point at the
exported files; a link to a page that was not exported keeps its words and loses its link.
"""

from __future__ import annotations

import argparse
import base64
import html
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

import panel as pn
from bokeh.document import Document
from bokeh.models import ImportedStyleSheet, InlineStyleSheet
from bokeh.resources import INLINE
from panel.io.model import add_to_doc
from panel.io.resources import CDN_DIST
from panel.io.save import save

from engine.lab.client import EngineService
from engine.lab.events import Job, JobEvent
from widgets.html import html_pane, site_html
from widgets.site_css import LOGO, site_css
from widgets.static_choice import static_checkpoint, static_prediction

from .base import LessonPage
from .registry import LESSONS, LessonInfo, lesson_class
from .session_jobs import SessionJobs
from .url_state import apply_query_args

LESSON_TIMEOUT_S = 1800.0  # the slowest default view, lesson 8's rate sweep, takes minutes on a CPU
QUIET_S = 0.5  # no job open for this long: the page has drawn what its default view measures
STATIC_INTRO = "The numbers on this page were measured before you opened it. Predict first:"


class ExportError(Exception):
    """A lesson that could not be exported (a job failed or never finished): one line."""


@dataclass
class Measured:
    """The result events a page received: where and when its numbers were measured."""

    events: list[JobEvent] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        return sorted({e.device for e in self.events if e.device})

    def when(self) -> str:
        """The time span of the measurements, in UTC, to the minute."""
        times = sorted(e.measured_at[:16].replace("T", " ") for e in self.events if e.measured_at)
        if not times:
            return "at an unknown time"
        return f"at {times[0]} UTC" if times[0] == times[-1] else \
            f"between {times[0]} and {times[-1]} UTC"


class ExportJobs(SessionJobs):
    """A page's jobs outside any browser session, each result and failure also recorded and
    reported to `on_final` (the command's progress lines)."""

    def __init__(self, service: EngineService, on_final: Callable[[JobEvent], None]):
        super().__init__(doc=None, service=service)
        self.submitted: list[Job] = []
        self.measured = Measured()
        self.failures: list[str] = []
        self._on_final = on_final

    def submit(self, kind, params=None, on_event=None, use_cache=True, **queue) -> Job:
        job = super().submit(kind, params, on_event, use_cache, **queue)
        self.submitted.append(job)
        return job

    def _receive(self, handler, event: JobEvent) -> None:
        if event.type == "result":
            self.measured.events.append(event)
        elif event.type == "error":
            self.failures.append(f"{event.kind} failed: {event.data.get('message', '')}")
        if event.final:
            self._on_final(event)
        super()._receive(handler, event)

    def wait_until_quiet(self, timeout: float = LESSON_TIMEOUT_S) -> None:
        """Until no submitted job has been open for QUIET_S (a result may start another job)."""
        deadline = time.monotonic() + timeout
        quiet_since = None
        while True:
            now = time.monotonic()
            if any(not job.finished for job in self.submitted):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= QUIET_S:
                return
            if now > deadline:
                raise ExportError(f"its measurements did not finish within {timeout:.0f} s")
            time.sleep(0.05)  # polling jobs that finish on the service's thread


Settings = Mapping[str, list[str]]  # a lesson's query arguments, as parse_qs gives them


def lesson_settings(text: str) -> tuple[str, Settings]:
    """`SLUG` or `SLUG?name=value&...` (a lesson URL's settings): the slug and its settings, each
    checked as the page would take it from its URL. A setting the page has not, or a value it
    would clamp or refuse, is a ValueError saying which: a command gets no silent corrections."""
    slug, _, query = text.partition("?")
    known = {info.slug: info for info in LESSONS}
    if slug not in known:
        raise ValueError(f"no lesson called {slug!r}: choose from {', '.join(known)}")
    settings = parse_qs(query, keep_blank_values=True)
    cls = lesson_class(known[slug])
    names = cls.url_parameter_names()
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise ValueError(f"{slug} has no setting {unknown[0]!r}: it takes {', '.join(names)}")
    notices = apply_query_args(cls(), settings, names)
    if notices:  # "The link asked for X = 1, below ...; it is set to ...": what was wrong
        wrong = re.sub(r"^The link (asked for|gave) ", "", notices[0].split(";")[0])
        raise ValueError(f"{slug}: {wrong.rstrip('.')}")
    return slug, settings


def build_page(info: LessonInfo, service: EngineService, on_final: Callable[[JobEvent], None],
               settings: Settings | None = None) -> tuple[LessonPage, ExportJobs]:
    """The lesson at its default view (or the settings given) drawn from the cache or measured
    now."""
    page = lesson_class(info).from_url(settings or {}, sync=False)
    jobs = page._jobs = ExportJobs(service, on_final)
    if page.prediction_box is not None:
        page.prediction_box.skip()  # no reader to wait for: the default view measures at once
    page.__panel__()  # drawn outside a server: start() runs now
    page.export_run()
    jobs.wait_until_quiet()
    if jobs.failures:
        raise ExportError("; ".join(jobs.failures))
    return page, jobs


def rewrite_links(text: str, exported: set[str]) -> str:
    """Links to lessons exported beside this one point at their files, the course map at the
    index; any other link into the app (a page not exported) keeps its words, not its link."""
    def lesson_link(m: re.Match) -> str:
        slug = m.group(1)
        return f'href="{slug}.html"' if slug in exported else m.group(0)

    text = re.sub(r'href="app\?lesson=([\w-]+)[^"]*"', lesson_link, text)
    text = text.replace('href="app"', 'href="index.html"')
    return re.sub(r'<a href="app(?:\?[^"]*)?"[^>]*>(.*?)</a>', r"\1", text, flags=re.S)


def replace_in(layout: pn.layout.ListLike, old: object, new: pn.viewable.Viewable) -> bool:
    """Put `new` where `old` is, anywhere in the layout's tree; whether it was found."""
    for i, obj in enumerate(layout.objects):
        if obj is old:
            layout[i] = new
            return True
        if isinstance(obj, pn.layout.ListLike) and replace_in(obj, old, new):
            return True
    return False


def banner(page: LessonPage, measured: Measured, exported_at: str) -> str:
    devices = ", ".join(measured.devices) or "this machine"
    return site_html(
        f'<p class="static-note"><strong>A static copy</strong> of lesson {page.info.number}, '
        f"exported {exported_at} UTC. Its numbers were measured by the course's engine on "
        f"{html.escape(devices)} {measured.when()}. The controls show how they were set; moving "
        "them needs the live app (<code>panel serve app.py</code>), which measures on its own "
        "machine. The prediction, the checkpoint and the data downloads work here.</p>")


def static_view(page: LessonPage, measured: Measured, exported: set[str],
                exported_at: str) -> pn.Column:
    """The built page made fit for a file (module docstring)."""
    view = page.__panel__()
    box = page.prediction_box
    if box is not None:
        replace_in(view, box.__panel__(), html_pane(static_prediction(
            box.question.prompt, box.question.choices, box.measured, box.detail,
            STATIC_INTRO)))
    if page.questions:
        replace_in(view, page.checkpoint.__panel__(), html_pane(static_checkpoint(
            [q.question for q in page.checkpoint.questions], page.checkpoint.seed)))
    for part, replacement in page.static_swaps():
        if not replace_in(view, part, replacement):
            raise ExportError(f"lesson {page.info.number}'s static_swaps names a part its "
                              "page does not show")
    for widget in view.select(pn.widgets.Widget):
        if isinstance(widget, pn.widgets.FileDownload):
            widget.embed = True  # the file goes inside the page
        else:
            widget.disabled = True
    for pane in view.select(lambda o: isinstance(o, (pn.pane.HTML, pn.pane.Markdown))):
        if isinstance(pane.object, str) and 'href="app' in pane.object:
            pane.object = rewrite_links(pane.object, exported)
    return pn.Column(html_pane(banner(page, measured, exported_at)), view,
                     sizing_mode="stretch_width")


PANEL_DIST = Path(pn.__file__).parent / "dist"


def inline_panel_css(doc: Document) -> int:
    """Put Panel's own component stylesheets inside the document: in a saved page they are
    links to Panel's CDN (whatever the resources mode), which a file opened offline cannot
    fetch; the same files ship in the installed package. The count replaced."""
    inlined: dict[str, InlineStyleSheet] = {}

    def local(sheet):
        if not (isinstance(sheet, ImportedStyleSheet) and sheet.url.startswith(CDN_DIST)):
            return sheet
        url = sheet.url.split("?")[0]
        if url not in inlined:
            path = PANEL_DIST / url.removeprefix(CDN_DIST)
            inlined[url] = InlineStyleSheet(css=path.read_text(encoding="utf-8"))
        return inlined[url]

    for model in list(doc.models):
        sheets = getattr(model, "stylesheets", None)
        if sheets:
            model.stylesheets = [local(sheet) for sheet in sheets]
    return len(inlined)


def save_page(view: pn.viewable.Viewable, path: Path, title: str) -> None:
    """One self-contained HTML file: Bokeh's and Panel's JavaScript and every stylesheet inside."""
    doc = Document()
    add_to_doc(view.get_root(doc), doc)
    inline_panel_css(doc)
    # the template's default icons are links to Panel's CDN too: the course's logo instead
    logo = base64.b64encode(LOGO.read_bytes()).decode()
    save(doc, str(path), resources=INLINE, title=title, template_variables={
        "app_favicon": f"data:image/svg+xml;base64,{logo}", "apple_icon": ""})


def index_html(lessons: Iterable[LessonInfo], exported_at: str) -> str:
    """The course map of the exported lessons, in the site's style, no script."""
    items = "".join(
        f'<li><a href="{info.slug}.html">Lesson {info.number}: {html.escape(info.title)}</a>'
        f"<br>{html.escape(info.measures)}</li>" for info in lessons)
    body = site_html(
        "<h1>LLM serving speed: the course</h1>"
        f"<p>A static copy, exported {exported_at} UTC: each lesson shows the numbers recorded "
        "when it was exported. The live app measures on its own machine.</p>"
        f'<ol class="lessons">{items}</ol>')
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            "<title>LLM serving speed: the course (static copy)</title>"
            f"<style>{site_css()}</style></head><body>{body}</body></html>")


def export(lessons: list[LessonInfo], out: Path, service: EngineService,
           say: Callable[[str], None], settings: Mapping[str, Settings] | None = None
           ) -> list[str]:
    """Write each lesson's page (at its default view, or the settings given by slug) and the
    index into `out`; the lessons that failed, with why."""
    settings = settings or {}
    out.mkdir(parents=True, exist_ok=True)
    exported = {info.slug for info in lessons}
    failed, written = [], []
    for info in lessons:
        started = time.monotonic()
        say(f"{info.slug}: measuring its default view (or reading it from the cache)")

        def on_final(event: JobEvent, slug=info.slug, started=started) -> None:
            how = "from the cache" if event.cached else "measured" if event.type == "result" \
                else event.type
            say(f"{slug}: {event.kind} {how} ({time.monotonic() - started:.1f} s)")

        path = out / f"{info.slug}.html"
        try:
            page, jobs = build_page(info, service, on_final, settings.get(info.slug))
            exported_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
            save_page(static_view(page, jobs.measured, exported, exported_at), path,
                      f"Lesson {info.number}: {info.title}")
        except ExportError as e:
            failed.append(f"{info.slug}: {e}")
            say(f"{info.slug}: not exported: {e}")
            continue
        written.append(info)
        say(f"{info.slug}: wrote {path}")
    if written:
        exported_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
        (out / "index.html").write_text(index_html(written, exported_at), encoding="utf-8")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons.export",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", action="append", metavar="SLUG[?SETTINGS]", default=[],
                        help="this lesson (repeat for more), at its default view or at the "
                             "settings its URL would take, e.g. 'knob?batch_size=16'")
    parser.add_argument("--all", action="store_true",
                        help="every lesson, with an index (a --lesson with settings sets that "
                             "lesson's view)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="the folder to write the pages into (made if missing)")
    args = parser.parse_args(argv)
    if not args.lesson and not args.all:
        parser.error("say which lessons: --lesson SLUG (repeat for more) or --all")
    try:
        settings = dict(lesson_settings(text) for text in args.lesson)
    except ValueError as e:
        parser.error(str(e))
    lessons = [i for i in LESSONS if args.all or i.slug in settings]
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file, not a folder")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    service = EngineService()
    try:
        failed = export(lessons, args.out, service, say, settings)
    except OSError as e:
        print(f"error: cannot write into {args.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    finally:
        service.shutdown()
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
