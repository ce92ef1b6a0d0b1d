"""One number per reader's browser, kept in a cookie: it seeds the order of checkpoint choices,
so a reload shows the same order while the reader next to you gets another.

Why a cookie: it survives a reload and a restart of the server, and it is not part of a link, so
a link shared with the class does not hand everyone one order (a URL parameter would). The server
reads it from the request that opens the page; when it is missing (a first visit, cookies off, an
iframe whose browser blocks third-party cookies) the server picks a new number and the page
stores it when it has loaded, so the next reload keeps that order. Outside a server the seed is 0.
"""

from __future__ import annotations

import secrets
import weakref

import panel as pn
from bokeh.models import CustomJS

COOKIE = "llm_speed_reader"
MAX_SEED = 2**31 - 1
ONE_YEAR_S = 365 * 24 * 3600

# Stores the server's pick once the page has loaded, unless the browser already has one.
STORE_JS = f"""
if (!document.cookie.split('; ').some((c) => c.startsWith('{COOKIE}='))) {{
  document.cookie = '{COOKIE}=' + seed + '; path=/; max-age={ONE_YEAR_S}; SameSite=Lax';
}}
"""

_by_document: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def parse_seed(value: str | None) -> int | None:
    """The cookie's number, or None when it is missing or not one of ours."""
    if value is None or not value.isdigit() or len(value) > 10:
        return None
    seed = int(value)
    return seed if seed <= MAX_SEED else None


def reader_seed() -> int:
    """This reader's seed: from the cookie, or a new one that the page then stores."""
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:
        return 0
    if doc in _by_document:  # one seed per page view, however many checkpoints ask
        return _by_document[doc]
    seed = parse_seed(pn.state.cookies.get(COOKIE))
    if seed is None:
        seed = secrets.randbelow(MAX_SEED + 1)
        doc.js_on_event("document_ready", CustomJS(args={"seed": str(seed)}, code=STORE_JS))
    _by_document[doc] = seed
    return seed
