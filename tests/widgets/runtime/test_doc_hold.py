"""widgets.runtime.doc_hold.model_index_held: the page's model index is walked once at the end if its
graph of models changed while held, not at all if only text and numbers did; and it is right
afterwards either way (every model of the page indexed, none that left it)."""

from __future__ import annotations

import panel as pn
from bokeh.document import Document
from bokeh.models import Div

from widgets.html import html_pane
from widgets.runtime.doc_hold import model_index_held


def page() -> tuple[Document, pn.Column, list[int]]:
    """A document with a column of site HTML panes, and a list counting its index walks."""
    doc = Document()
    column = pn.Column(html_pane("<p>status</p>"), html_pane("<p>table</p>"))
    doc.add_root(column.get_root(doc))
    walks: list[int] = []
    recompute = doc.models.recompute
    doc.models.recompute = lambda: (walks.append(1), recompute())[1]
    return doc, column, walks


def test_text_alone_walks_nothing_where_a_freeze_walks_once():
    doc, column, walks = page()
    with doc.models.freeze():
        column[0].object = "<p>queued: 3 ahead</p>"
    assert len(walks) == 1  # Bokeh's freeze walks at its end whatever happened
    walks.clear()
    with model_index_held(doc):
        column[0].object = "<p>queued: 2 ahead</p>"
        column[1].object = "<p>a new table</p>"
    assert walks == []


def test_a_changed_graph_is_walked_once_and_indexed():
    doc, column, walks = page()
    root = doc.roots[0]
    added, gone = Div(text="new"), root.children[1]
    with model_index_held(doc):
        root.children = [root.children[0], added]
        root.children = [*root.children]  # a second change: still one walk
        assert walks == []  # held: nothing walked meanwhile
    assert len(walks) == 1
    assert doc.get_model_by_id(added.id) is added
    assert doc.get_model_by_id(gone.id) is None


def test_holds_nest_and_the_outer_one_walks():
    doc, _, walks = page()
    root = doc.roots[0]
    with model_index_held(doc):
        with model_index_held(doc):
            root.children = [*root.children, Div(text="inner")]
        assert walks == []  # the inner hold's walk waits for the outer one
    assert len(walks) == 1
    assert "invalidate" not in doc.models.__dict__  # Bokeh's own method is back
