"""The site's stylesheet and logo, carried inside the page itself rather than served as files.

`panel serve app.py` (the command a Panel user tries first) serves no static directory, so a
stylesheet URL like assets/app.css answers 404 unless the server was started with
--static-dirs. Inline, the look needs no server option, works on a page embedded in another
site by a script tag (no URL to resolve against the wrong origin), and survives a static export.
Panel puts the text in every pane's model (about 6 kB each, ~20 panes a lesson), beside its
own loading CSS and A11Y_CSS in every model: `share_stylesheets(doc)` sends each such text once
per page instead (one stylesheet model the others name by id), and keeps them shared when an
HTML or Markdown pane updates (`keep_sheets_shared`).
"""

from __future__ import annotations

import weakref
from collections import Counter
from functools import cache

from bokeh.models import InlineStyleSheet
from panel.pane.markup import HTMLBasePane

from engine.config import ASSETS


@cache
def site_css() -> str:
    """assets/app.css, the course's look."""
    return (ASSETS / "app.css").read_text(encoding="utf-8")


# The header's logo and the favicon: a local file, which Panel's template embeds in the page as a
# data: URL itself. A data: URL given directly breaks every page: Panel takes the favicon's type
# from the name's ending (.svg, .png, ...) and answers 500 for any other.
LOGO = ASSETS / "logo.svg"


def site_stylesheets() -> list[str]:
    """The stylesheets list for a pane in the site's style (each pane has its own shadow DOM,
    which the page's own stylesheet does not reach): the CSS text itself. Panel accepts only
    strings here (a shared stylesheet model is refused), and turns only URLs into imports."""
    return [site_css()]


# A text shorter than this costs less inline than as a model of its own plus a reference.
SHARE_MIN_CHARS = 100


def share_stylesheets(doc) -> int:
    """Every stylesheet text that several models of `doc` carry inline becomes one
    InlineStyleSheet model of the page, which those models name by id; the count replaced.

    Panel's `stylesheets` takes strings only, so each pane holds its own copy: the site's CSS in
    ~20 panes, Panel's loading CSS and A11Y_CSS (pn.extension's raw_css) in every model, about
    200 of a lesson page's 270 kB, serialized and sent to each reader. BokehJS installs a
    stylesheet model into each view's shadow root just as it does a string (a <style> of its own
    per view), so the page looks the same. Run it once the page's models are built and before
    the page is sent. An HTML or Markdown pane built or updated later gets the page's shared
    models too (keep_sheets_shared); other models built later carry their texts inline."""
    # asked of the class first: Bokeh answers a missing attribute by searching every property
    # name for a close match to suggest (difflib): a sixth of this function's time on a lesson
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


_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # doc -> {css text: its model}


def keep_sheets_shared() -> None:
    """Make HTML and Markdown panes name their page's shared stylesheet models (share_stylesheets)
    instead of the texts, when built after the share and each time they update (installed once,
    for every pane of the process; a page that shared nothing is left as it was).

    An HTML pane's update sets every property of its model again (Panel's HTMLBasePane._update),
    stylesheets included, as the texts: so each update of a status line or a table sent 6-20 kB
    of CSS to the browser again, left the shared model, and made Bokeh walk every model of the
    page (the old value held a model). With this and doc_hold.model_index_held, the walks in
    frames of engine events fell from 144 to 90 of ~1800 web-process samples while a class of
    30 arrived (py-spy, bench/classroom.py, 2026-11-29); what remains is each pane's first
    update adding the design's stylesheets its built model lacked."""
    if getattr(HTMLBasePane._get_properties, "keeps_sheets_shared", False):
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
