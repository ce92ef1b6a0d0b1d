"""The browser clock without a browser: its JavaScript is attached to the watched source's
stream event and to the start button's click; stamps synced back from the browser (a change of
`into`'s data) become `stamps_ms`. The browser side itself runs in tests/ui."""

from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource

from widgets.browser_clock import STAMP_JS, START_JS, BrowserClock


def sources():
    empty = {"x": [], "row": [], "index": [], "text": []}
    return ColumnDataSource(dict(empty)), ColumnDataSource(dict(empty))


def test_javascript_runs_when_rows_are_streamed():
    watch, into = sources()
    clock = BrowserClock(watch=watch, into=into, row="browser")
    callbacks = watch.js_property_callbacks["streaming"]
    assert callbacks == [clock.callback]
    assert clock.callback.code == STAMP_JS
    assert clock.callback.args["out"] is into and clock.callback.args["row"] == "browser"
    assert "performance.now()" in STAMP_JS and "out.stream(" in STAMP_JS


def test_start_button_stamps_time_zero_in_the_browser():
    watch, into = sources()
    clock = BrowserClock(watch=watch, into=into)
    button = pn.widgets.Button(label="Send")
    clock.attach_start(button)
    model = button.get_root()
    assert any(START_JS in cb.code for cbs in model.js_event_callbacks.values() for cb in cbs)


def test_stamps_synced_back_become_a_mapping_and_reset_clears_them():
    watch, into = sources()
    clock = BrowserClock(watch=watch, into=into)
    seen = []
    clock.param.watch(lambda e: seen.append(e.new), "stamps_ms")
    # what the server applies when the browser streams its stamps
    into.data = {"x": [310.5, 322.0], "row": ["b", "b"], "index": [0, 1], "text": ["", ""]}
    assert clock.stamps_ms == {0: 310.5, 1: 322.0} and seen
    clock.reset()
    assert clock.stamps_ms == {} and into.data["x"] == []


def test_a_clock_without_a_target_makes_its_own_source():
    watch, _ = sources()
    clock = BrowserClock(watch=watch)
    assert set(clock.into.data) == {"x", "row", "index", "text"}


def test_a_served_start_click_leaves_panels_registry_when_its_session_ends():
    """Panel's js_on_click registry is keyed weakly by the button, but the click's args lead back
    to the page holding the button: unless the session's end removes it, every page stays."""
    import weakref

    from bokeh.document import Document
    from panel.io.state import set_curdoc
    from panel.links import Callback

    class Context:  # what a served document's session_context stands for here
        id = "a-session"

    watch, into = sources()
    clock = BrowserClock(watch=watch, into=into)
    button = pn.widgets.Button(label="Send")
    doc, context = Document(), Context()
    doc._session_context = weakref.ref(context)
    with set_curdoc(doc):
        clock.attach_start(button)
    assert [c.code for c in Callback.registry[button]] == [{"event:button_click": START_JS}]
    for destroyed in list(doc.callbacks.session_destroyed_callbacks):
        destroyed(context)
    assert Callback.registry.get(button, []) == []
