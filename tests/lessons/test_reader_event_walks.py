"""A reader's UI event on a served lesson page walks the page's model index once, however many
panes its callbacks update (widgets.runtime.doc_hold.one_walk_per_reader_event, installed by
app.serve_page): the page's "document ready", which starts the lesson, and a click. A plain
property patch (a slider's value) walks nothing, as before."""

from __future__ import annotations

from functools import partial

from bokeh.document import Document
from bokeh.server.contexts import BokehSessionContext, _RequestProxy
from panel.io.state import set_curdoc, state

from bench.lab.students import button_click, document_ready, model_changed
from lessons.session_jobs import SessionJobs
from tests.lessons.test_session_jobs import StubService


def _served_page(slug: str) -> tuple[Document, list[int]]:
    """The lesson's page as app.serve_page builds it for a session (its jobs go to a stub
    service, which answers every job at once from "the cache"), with Panel's hook for the
    browser's ready event, and a list that counts the model-index walks from then on."""
    from app import serve_page

    doc = Document()
    context = BokehSessionContext(f"reader-{slug}", None, doc)
    context._request = _RequestProxy(None, arguments={"lesson": [slug.encode()]})
    doc._session_context = lambda: context
    SessionJobs._by_doc[doc] = SessionJobs(doc=doc, service=StubService())
    with set_curdoc(doc):
        serve_page(doc)
    doc.on_event("document_ready", partial(state._schedule_on_load, doc))  # as Panel's app does
    walks: list[int] = []
    recompute = doc.models.recompute
    doc.models.recompute = lambda: (walks.append(1), recompute())[1]
    return doc, walks


def _apply(doc: Document, patch: dict, held: bool = True) -> None:
    """The patch as a PATCH-DOC from the browser is applied (held: through the page's own
    apply_json_patch; not: Bokeh's, as before)."""
    with set_curdoc(doc):
        if held:
            doc.apply_json_patch(patch)
        else:
            Document.apply_json_patch(doc, patch)


def test_the_ready_event_starts_the_lesson_with_one_walk_not_one_per_pane():
    unheld, unheld_walks = _served_page("knob")
    _apply(unheld, document_ready(), held=False)
    doc, walks = _served_page("knob")
    _apply(doc, document_ready())
    assert len(unheld_walks) >= 2  # the start updates several panes: a walk for each
    assert len(walks) == 1
    assert state._loaded.get(doc)  # the lesson did start


def test_a_click_walks_at_most_once_and_a_slider_patch_not_at_all():
    doc, walks = _served_page("knob")
    _apply(doc, document_ready())
    skip = next(m for m in doc.models
                if type(m).__name__ == "Button" and "skip" in str(m.label).lower())
    slider = next(m for m in doc.models if type(m).__name__.endswith("Slider"))
    walks.clear()
    _apply(doc, button_click(skip.id))
    assert len(walks) <= 1
    assert not skip.visible  # the click was handled: the skip button hides
    walks.clear()
    _apply(doc, model_changed(slider.id, "value", slider.value))
    assert walks == []
