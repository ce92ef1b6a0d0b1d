"""Each stylesheet text a page repeats, sent once: one InlineStyleSheet model that the page's models
name by id, kept shared when an HTML or Markdown pane updates. Patches Panel's
HTMLBasePane._get_properties.

Why: Panel's `stylesheets` takes strings only, so every pane carries its own copy of the site's
CSS (widgets.site_css, in each HTML pane) and every model Panel's loading CSS and A11Y_CSS
(pn.extension's raw_css). Those copies are most of a lesson page's first message, serialized and
sent to each reader. And an HTML pane's update sets every property of its model again,
stylesheets included, as the texts: each update of a status line or a table re-sent the CSS,
dropped the shared model and made Bokeh walk every model of the page (the old value held a
model). BokehJS installs a stylesheet model into each view's shadow root just as it does a
string, so the page looks the same.
"""

from __future__ import annotations

import weakref
from collections import Counter

from bokeh.models import InlineStyleSheet
from panel.pane.markup import HTMLBasePane

# A text shorter than this costs less inline than as a model of its own plus a reference.
SHARE_MIN_CHARS = 100

_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # doc -> {css text: its model}


def share_stylesheets(doc) -> int:
    """Every stylesheet text that several models of `doc` carry inline becomes one
    InlineStyleSheet model of the page, which those models name by id; the count replaced.

    Run it once the page's models are built and before the page is sent (app.serve_page). An
    HTML or Markdown pane built or updated later gets the page's shared models too
    (keep_sheets_shared); other models built later carry their texts inline."""
    # asked of the class first: Bokeh answers a missing attribute by searching every property
    # name for a close match to suggest (difflib), a large share of this function's time
    carriers = [m for m in doc.models
                if type(m).lookup("stylesheets", raises=False) is not None and m.stylesheets]
    counts = Counter(css for m in carriers for css in m.stylesheets
                     if isinstance(css, str) and len(css) >= SHARE_MIN_CHARS)
    shared = {css: InlineStyleSheet(css=css) for css, n in counts.items() if n > 1}
    keep_sheets_shared()
    _SHARED.setdefault(doc, {}).update(shared)
    replaced = 0
    with doc.models.freeze():  # one recomputation of the model index, not one per model
        for model in carriers:
            sheets = naming_shared(model.stylesheets, shared)
            if any(a is not b for a, b in zip(sheets, model.stylesheets)):
                model.stylesheets = sheets
                replaced += 1
    return replaced


def naming_shared(sheets: list, shared: dict) -> list:
    """A stylesheets list with each text that has a shared model replaced by that model."""
    return [shared.get(css, css) if isinstance(css, str) else css for css in sheets]


def keep_sheets_shared() -> None:
    """Make HTML and Markdown panes name their page's shared stylesheet models (share_stylesheets)
    instead of the texts, when built after the share and each time they update (installed once,
    for every pane of the process; a page that shared nothing is left as it was).

    Panel's HTMLBasePane._update sets every property of an HTML pane's model on each update,
    stylesheets included, from `_get_properties`: wrapped here, that list names the shared
    models, so an update sends no CSS and leaves the page's graph of models as it was. What
    remains is each pane's first update adding the design's stylesheets its built model lacked."""
    if installed():
        return
    texts_only = HTMLBasePane._get_properties

    def get_properties(self, doc):
        props = texts_only(self, doc)
        shared = _SHARED.get(doc) if doc is not None else None
        if shared and "stylesheets" in props:
            props["stylesheets"] = naming_shared(props["stylesheets"], shared)
        return props

    get_properties.keeps_sheets_shared = True
    HTMLBasePane._get_properties = get_properties


def installed() -> bool:
    return getattr(HTMLBasePane._get_properties, "keeps_sheets_shared", False)
