"""The site's shell without a browser: the registry, every lesson page, the router's choices,
the not-found pages (the rule that the web process never imports torch is in
tests/test_layering.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import panel as pn
import param
import pytest
from lesson_stubs import attach

from engine.lab import registry as jobs
from lessons.base import LessonPage
from lessons.registry import LESSONS, lesson_class, lesson_info, neighbours
from lessons.shell.router import choose
from lessons.shell.vocabulary import GROUPS, TERMS, vocabulary_table
from lessons.teaching import Cached

ROOT = Path(__file__).resolve().parents[2]
SLUGS = ["two-clocks", "average-lies", "three-schedules", "knob", "roofline", "kv-cache",
         "chunked-prefill", "slo-goodput", "prefix-cache",
         "speculative", "quantization", "capacity", "batch-invariance", "experts",
         "disaggregation", "traffic-classes"]
NUMBERS = list(range(1, 17))  # lesson numbers are fixed


def test_registry_has_the_lessons_in_order():
    assert [lesson.slug for lesson in LESSONS] == SLUGS
    assert [lesson.number for lesson in LESSONS] == NUMBERS
    assert all(lesson.measures and lesson.title for lesson in LESSONS)
    assert neighbours("two-clocks")[0] is None and neighbours(SLUGS[-1])[1] is None
    assert neighbours("knob")[0].slug == "three-schedules"


@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_page_builds(slug):
    info = lesson_info(slug)
    cls = lesson_class(info)
    assert issubclass(cls, LessonPage) and cls.slug == slug
    page = cls.from_url({})
    service = attach(page)  # drawn outside a server the page starts at once: jobs to a stand-in
    model = pn.panel(page).get_root()
    text = " ".join(str(getattr(m, "text", "")) for m in model.references())
    assert info.title in text and "Course map" in text and page.started
    # started: it asked the engine for its first measurement (two clocks: the machine's
    # description; its generation waits for the reader's Send), checked by the job registry
    assert service.submitted and all(j.params for j in service.submitted)
    # and every measurement it asked for is one `python -m lessons.warm` fills the cache with,
    # so a class's first readers wait for none (the machine's description is read from the
    # set-up's limits)
    warmed = [(kind, jobs.normalize(kind, params)) for kind, params in cls.warm_jobs()]
    unwarmed = [(j.kind, j.params) for j in service.submitted
                if j.kind != "info" and (j.kind, j.params) not in warmed]
    assert unwarmed == []


def test_a_periodic_callback_changes_no_open_page():
    """Every periodic callback (a status line's timer, 4 a second per reader) flips Panel's
    process-wide busy flag on and off; a template's busy spinner follows that flag on every open
    page, so each reader's tick updated and messaged every other reader's page (work growing
    with the square of the readers, most of the web core in a class of 30). The site's pages
    have no spinner: the flag's flips change no page."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc

    from lessons.shell.template import page

    docs = [Document(), Document()]
    for doc in docs:
        with set_curdoc(doc):
            page([pn.pane.HTML("a lesson")], "A lesson", "index").server_doc(doc)
    changes = []
    for doc in docs:
        doc.on_change(changes.append)
    pn.state._add_busy_event("a-readers-tick")  # what PeriodicCallback does around each call
    pn.state._remove_busy_event("a-readers-tick")
    assert changes == []


def test_router_picks_pages():
    content, title, current = choose({})
    assert current == "index" and "LLM serving speed" in title
    content, title, current = choose({"lesson": [b"knob"]})
    assert current == "knob" and isinstance(content[0], LessonPage)
    _, title, current = choose({"page": [b"vocabulary"]})
    assert current == "vocabulary"


@pytest.mark.parametrize("args, words", [({"lesson": [b"nope"]}, "no lesson called"),
                                         ({"page": [b"nope"]}, "no page called")])
def test_unknown_names_get_a_friendly_page(args, words):
    content, title, current = choose(args)
    html = content[0].object
    assert title == "Not found" and words in html
    assert all(f"app?lesson={slug}" in html for slug in SLUGS)


def test_vocabulary_defines_every_term_once():
    anchors = [t.anchor for t in TERMS]
    assert len(anchors) == len(set(anchors))
    table = vocabulary_table()
    for needed in ("ttft", "tpot", "itl", "e2e", "queue", "throughput", "per-user-speed",
                   "goodput", "percentiles",
                   # the terms the lessons use (issue 13, item 14) and issue 18's load models
                   "static-batching", "dynamic-batching", "continuous-batching",
                   "batching-window", "iteration-level", "paged-attention", "block-table",
                   "preemption", "chunked-prefill", "token-budget", "roofline",
                   "arithmetic-intensity", "ridge-point", "gqa", "slo-attainment", "poisson",
                   "right-skew", "cost", "prefix-caching", "speculative-decoding",
                   "tensor-parallelism", "compute-bound", "memory-bound", "open-loop",
                   "closed-loop",
                   # lesson 12's (issue 15)
                   "replica", "littles-law", "all-reduce"):
        assert f'id="{needed}"' in table
    assert "TTLT" in table and "MQA" in table
    assert {t.group for t in TERMS} == set(GROUPS)


def test_every_link_into_the_vocabulary_names_a_term():
    anchors = {t.anchor for t in TERMS}
    linked = {(path.name, name) for folder in ("lessons", "widgets")
              for path in (ROOT / folder).rglob("*.py")
              for name in re.findall(r"page=vocabulary#([\w-]+)", path.read_text())}
    assert {name for _file, name in linked} >= {"replica", "littles-law", "tensor-parallelism",
                                                 "all-reduce"}  # lesson 12's
    assert [link for link in sorted(linked) if link[1] not in anchors] == []


def test_page_parameters_may_not_take_reserved_query_names():
    class Bad(LessonPage):
        slug = "knob"
        lesson = param.Integer(default=1)

    with pytest.raises(TypeError, match="reserved"):
        Bad()


def test_lesson_parameters_come_from_the_url_clamped():
    class Probe(LessonPage):
        slug = "knob"
        batch_size = param.Integer(default=8, bounds=(1, 64), label="Batch size")

    page = Probe.from_url({"lesson": [b"knob"], "batch_size": [b"999"]})
    assert page.batch_size == 64
    assert page.notices and "largest allowed (64)" in page.notices[0]
    assert page._notice_pane.visible
    assert page.__panel__().objects[1] is page._notice_pane  # under the header


def test_a_notice_pane_is_built_only_for_a_url_that_needs_one():
    """Nearly every reader's URL is fine: no hidden notice box in their page's models (a hidden
    pane costs a build as much as a shown one). A notice coming later (the back button to
    values out of range) puts the box under the header then."""
    class Probe(LessonPage):
        slug = "knob"
        batch_size = param.Integer(default=8, bounds=(1, 64), label="Batch size")

    page = Probe.from_url({"lesson": [b"knob"], "batch_size": [b"16"]})
    layout = page.__panel__()
    assert page.notices == [] and page._notice_pane not in layout
    page._url_error({"batch_size": "999"})
    assert page.batch_size == 64 and layout.objects[1] is page._notice_pane
    assert page._notice_pane.visible and "largest allowed (64)" in page._notice_pane.object


def test_a_page_sends_each_stylesheet_text_once(tmp_path):
    """The site's CSS (in every prose pane), Panel's loading CSS and A11Y_CSS (in every model)
    were about 200 of a lesson page's 270 kB, each copy serialized and sent to every reader.
    Built as `panel serve app.py` builds it, the page's JSON holds each text once, and every
    pane that carried one still names it."""
    code = """if True:
        import json, sys
        import lessons.shell.router as router
        router.get_service = lambda: None  # no engine worker for a page that is only built
        import app
        from bokeh.core.json_encoder import serialize_json
        from bokeh.document import Document
        from bokeh.models import InlineStyleSheet
        from panel.io.state import set_curdoc
        from widgets.a11y import A11Y_CSS
        from widgets.site_css import site_css
        doc = Document()
        with set_curdoc(doc):
            app.serve_page(doc, {"lesson": [b"knob"]})
        def strings(o):
            if isinstance(o, dict):
                for v in o.values(): yield from strings(v)
            elif isinstance(o, list):
                for v in o: yield from strings(v)
            elif isinstance(o, str):
                yield o
        sent = list(strings(json.loads(serialize_json(doc.to_json()))))
        def naming(text):
            return sum(any(isinstance(s, InlineStyleSheet) and s.css == text
                           for s in getattr(m, "stylesheets", None) or ()) for m in doc.models)
        a11y = next(s for s in sent if A11Y_CSS.strip() in s)
        print(json.dumps([sent.count(site_css()), sent.count(a11y),
                          naming(site_css()), naming(a11y)]))
    """
    env = {**os.environ, "LLM_SPEED_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    site_sent, a11y_sent, site_panes, a11y_models = json.loads(out.stdout.splitlines()[-1])
    assert (site_sent, a11y_sent) == (1, 1)
    assert site_panes >= 10 and a11y_models >= 50  # a lesson page: ~20 panes, ~80 models


@pytest.mark.parametrize("warm", [True, False])
def test_a_warm_start_builds_every_page_once_and_keeps_none_of_them(tmp_path, warm):
    """Under `panel serve app.py --warm` app.py first runs before the server's loop does: every
    page is built then (lessons.shell.first_build), so every lesson's module and what a first
    build leaves for good (Panel's Markdown renderer, about a hundred modules) are in the process
    before its first reader (each module was imported by its first reader, while the class
    arrived), and no page of that build stays alive. Run in a reader's session (on the running loop: a server
    started without --warm), app.py builds its own page only. What the warm start holds is
    then frozen out of the garbage collector's walks; a reader's session freezes nothing."""
    code = """if True:
        import asyncio, gc, runpy, sys
        import lessons.shell.router as router
        router.get_service = lambda: None  # no engine worker for pages that are only built
        from bokeh.document import Document
        from panel.io.state import set_curdoc
        from lessons.base import LessonPage
        from lessons.registry import LESSONS

        def run_app():
            with set_curdoc(Document()):  # the warm-up's session (or a reader's): the course map
                runpy.run_path("app.py", run_name="bokeh_app_warm")

        async def in_a_session():
            run_app()

        if sys.argv[1] == "warm":
            run_app()
        else:
            asyncio.run(in_a_session())
        frozen = gc.get_freeze_count()
        gc.unfreeze()  # every object counted below, the start-up's frozen ones too
        gc.collect()
        print("markdown_it" in sys.modules,
              sum(isinstance(o, LessonPage) for o in gc.get_objects()), frozen > 0,
              all(m in sys.modules for m in ("numpy.ma", "numpy.random", "_strptime")),
              [i.view for i in LESSONS if i.view.partition(":")[0] not in sys.modules] == [])
    """
    env = {**os.environ, "LLM_SPEED_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code, "warm" if warm else "session"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    assert "start-up failed" not in out.stderr, out.stderr
    imported, pages_alive, frozen, result_imports, every_lesson = (
        out.stdout.strip().splitlines()[-1].split())
    assert imported == str(warm)  # the course map alone renders no Markdown
    assert pages_alive == "0"
    # the warm start's objects are left out of later collections; a reader's page is not frozen
    assert frozen == str(warm)
    if warm:  # every lesson, and what a first measured result imports, before the first reader
        assert result_imports == "True" and every_lesson == "True"


def test_service_status_in_plain_words_hides_readers_text():
    from lessons.shell.status_text import describe_status

    status = {"ready": True, "worker_pid": 42, "device": "cpu: Test", "engine_version": "0.1.0",
              "running": {"kind": "generate", "params": {"prompt": "my secret", "preset": "tiny",
                                                         "max_new_tokens": 8},
                          "progress": {"done": 3, "total": 8}, "running_s": 1.25},
              "queued": 2, "jobs_done": 5, "jobs_cancelled": 1, "cache_hits": 4,
              "cache_entries": 3, "restarts": 0, "threads": 1, "disturbed": 2, "remeasured": 1,
              "cores": {"engine": [1], "web": [0], "setting": "auto", "isolated": True,
                        "note": "CPU host: the engine gets all but ceil(cores / 8) for the web"}}
    text = describe_status(status)
    assert "the engine runs on core 1 with 1 torch thread, the web server on core 0" in text
    assert "Disturbed: 2 results" in text and "1 of them measured again" in text
    shared = describe_status({**status, "cores": {**status["cores"], "engine": [0, 1],
                                                  "web": [0, 1], "isolated": False}})
    assert "the engine and the web server share cores 0-1" in shared
    assert "process 42 on cpu: Test" in text and "running <b>generate</b>" in text
    assert "3 of 8 steps" in text and "Queued: 2 jobs" in text and "Cancelled: 1 " in text
    assert "my secret" not in text
    idle = describe_status({**status, "running": None, "ready": False})
    assert "Now: idle" in idle and "starting" in idle
    assert "Memory" not in text  # the status said nothing about it
    memory = {"worker": {"rss_mib": 412.4, "peak_mib": 1530.0, "idle_mib": 298.0},
              "web": {"rss_mib": 96.2, "peak_mib": 120.0}}
    text = describe_status({**status, "memory": memory})
    assert ("the engine worker holds 298 MiB idle, 412 MiB now and 1,530 MiB at its busiest"
            in text) and "this web process 96 MiB" in text


def test_only_parameters_a_reader_can_change_follow_the_url():
    class Probe(LessonPage):
        slug = "knob"
        batch_size = param.Integer(default=8, bounds=(1, 64))
        measured = param.List(default=[], precedence=-1)
        version = param.String(default="1", constant=True)

    assert Probe.url_parameter_names() == ["batch_size"]


def test_the_summary_page_has_every_takeaway_and_the_checklist():
    _, title, current = choose({"page": [b"summary"]})
    assert current == "summary" and title == "The course on one page"
    from lessons.shell.summary import CHECKLIST, summary_content

    html = summary_content()[0].object
    for info in LESSONS:
        assert f"Lesson {info.number}: " in html
        for line in lesson_class(info).takeaway:
            assert line.replace("'", "&#x27;") in html or line in html
    assert html.count("<li><strong>") == len(CHECKLIST) >= 9
    # a step links the lesson that teaches it, numbered as the course map numbers it; a lesson
    # not written yet is named, without a link
    for step in CHECKLIST:
        info = lesson_info(step.lesson)
        assert (f'<a href="{info.url}">lesson {info.number}</a>' if info
                else f"lesson {step.number}, coming") in html
    assert 'href="app?lesson=chunked-prefill"' in html and 'href="app?lesson=capacity"' in html
    assert ", coming" not in html  # every step's lesson is written


def test_instructor_notes_read_this_machines_numbers_from_the_cache():
    from lessons.shell.instructor import NOT_MEASURED, STARTING, instructor_content

    content, title = instructor_content(None)
    assert title == "Instructor notes"
    assert all(f"page=instructor&amp;lesson={s}" in content[0].object for s in SLUGS)
    empty, _ = instructor_content("knob", lambda: (lambda kind, params: None))
    assert NOT_MEASURED in empty[0].object and "Common misconceptions" in empty[0].object
    starting, _ = instructor_content("knob", lambda: None)
    assert STARTING in starting[0].object
    def knob_point(kind, params):  # tokens/s grows as the square root of the batch here
        point = SimpleNamespace(tokens_per_s=100.0 * params["batch_size"] ** 0.5, tpot_ms=8.0)
        return Cached(point, "cpu: test", "2026-11-23T10:00:00+0000")

    cached, title = instructor_content("knob", lambda: knob_point)
    assert title == "Instructor notes: The batch-size knob"
    assert "batch 64: 800 tokens/s in all" in cached[0].object
    # +41% at every doubling
    assert "The first doubling under +20%: None up to batch 64." in cached[0].object
    missing, title = instructor_content("nope", lambda: None)
    assert title == "Not found"
