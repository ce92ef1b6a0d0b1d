"""Accessibility (WCAG 2.1 AA) pieces that Panel and Bokeh do not give us, in one place.

How our pages follow it (lessons, widgets and the shell):
- Every page: `page_fixes(doc)` (the router calls it) names the controls Bokeh and Panel leave
  nameless (slider handles, checkboxes, spinner buttons, the Player) after their titles, and `A11Y_CSS` (app.py passes it to pn.extension as raw_css, which Panel adds to every
  component's shadow DOM and the template's head) keeps focus visible and honours
  prefers-reduced-motion.
- A chart: its figure gets an accessible name and is tied to its text alternative with
  `describe_chart(figure, name, summary_pane, table_pane)`: a one-sentence summary of what was
  measured (updated with the data) and the table of the same numbers. The three must be children
  of one Panel layout (ids are looked up inside one shadow root).
- A measurement or an error: `LiveRegion.announce("batch 16 measured: 2,296 tokens/s, 6.97 ms per
  token")`, read out politely, at most one message per MIN_GAP_S (a stream of tokens is not read
  one by one: the last message of a burst wins).
"""

from __future__ import annotations

import html
import itertools
import re
import time

import panel as pn
import param
from bokeh.events import DocumentReady
from bokeh.models import CustomJS

from .site_css import site_stylesheets

# Focus always visible (a two-tone ring shows on light, dark and the blue header), the skip link
# hidden until focused, no animation for readers who ask for reduced motion.
A11Y_CSS = """
:focus-visible {
  outline: 3px solid #1d2733 !important; outline-offset: 2px !important;
  box-shadow: 0 0 0 5px #ffffff !important;
}
.skip-link {
  position: absolute; left: 0.5rem; top: -4rem; z-index: 2000; padding: 0.5rem 1rem;
  background: #ffffff; color: #1d2733; border: 2px solid #1d2733; border-radius: 4px;
}
.skip-link:focus { top: 0.5rem; }
code { color: inherit !important; }  /* Markdown's code colour falls under 4.5:1 */
@media (prefers-reduced-motion: reduce) {
  *, *::before, *::after {
    animation-duration: 0s !important; animation-iteration-count: 1 !important;
    transition-duration: 0s !important; transition-delay: 0s !important;
    scroll-behavior: auto !important;
  }
}
"""

# On a pane's own element (its shadow host): there for screen readers, not drawn.
VISUALLY_HIDDEN_CSS = """
:host(.visually-hidden) {
  position: absolute !important; width: 1px !important; height: 1px !important;
  margin: -1px !important; padding: 0 !important; overflow: hidden !important;
  clip: rect(0, 0, 0, 0) !important; white-space: nowrap !important; border: 0 !important;
}
"""

# Controls Bokeh and Panel draw without an accessible name: a slider's handles (noUiSlider,
# role="slider"), a checkbox (its text is a sibling, not a <label>), a spinner's up and down
# buttons, the Player's icon buttons, frame slider and loop choices. Each gets a name from its
# widget's title or label, now and whenever its view renders again (its class's render wrapped).
NAME_CONTROLS_JS = """
const PLAYER = {slower: 'Slower', first: 'First frame', previous: 'Previous frame',
                reverse: 'Play backwards', pause: 'Pause', play: 'Play', next: 'Next frame',
                last: 'Last frame', faster: 'Faster'};
const title = (v) => String(v.model.title || v.model.label || v.model.name || '').trim();
const named = (v) => v.slider_el || v.checkbox_el || v.btn_up_el || (v.sliderEl && v.loop_state);
const name = (v) => {
  const t = title(v);
  if (v.slider_el)
    for (const h of v.slider_el.querySelectorAll('.noUi-handle')) h.setAttribute('aria-label', t || 'value');
  if (v.checkbox_el && t) v.checkbox_el.setAttribute('aria-label', t);
  // (not "Increase <title>": a label lookup by the field's title must find the field alone)
  if (v.btn_up_el) v.btn_up_el.setAttribute('aria-label', 'Increase');
  if (v.btn_down_el) v.btn_down_el.setAttribute('aria-label', 'Decrease');
  if (v.sliderEl && v.loop_state) {  // Panel's Player
    v.sliderEl.setAttribute('aria-label', t || 'Frame');
    for (const b of v.shadow_el.querySelectorAll('button')) {
      const key = [...b.classList].find((c) => c in PLAYER);
      if (key) b.setAttribute('aria-label', PLAYER[key]);
    }
    for (const r of v.loop_state.querySelectorAll('input[type=radio]'))
      r.setAttribute('aria-label', r.value);
  }
};
const patched = new WeakSet();
const patch = (proto) => {
  if (!proto || patched.has(proto)) return;
  const render = proto.render;
  proto.render = function () { render.call(this); name(this); };
  patched.add(proto);
};
const W = window.Bokeh && Bokeh.Widgets;
for (const kind of ['Slider', 'RangeSlider', 'Checkbox', 'Spinner'])
  if (W && W[kind]) patch(W[kind].prototype.default_view.prototype);
if (window.Bokeh && Bokeh.index)
  for (const view of Bokeh.index.all_views())
    if (named(view)) { patch(Object.getPrototypeOf(view)); name(view); }
"""


def page_fixes(doc) -> None:
    """Run the page-wide fixes when this document is ready in the browser."""
    if doc is not None:
        doc.js_on_event(DocumentReady, CustomJS(code=NAME_CONTROLS_JS))


_ids = itertools.count(1)


def unique_id(prefix: str) -> str:
    """An element id unique within this server process (so within any page)."""
    return f"{prefix}-{next(_ids)}"


class AriaAttributes(param.Parameterized):
    """For a Panel component whose own element (the host of its shadow DOM) carries an id and
    ARIA attributes, so that other elements can point at it and assistive technology reads it.
    Panel passes both to the Bokeh model's html_id and html_attributes."""

    html_id = param.String(default=None, allow_None=True, doc="The element's id.")
    html_attributes = param.Dict(default={}, doc="ARIA (and other) attributes of the element.")


class AriaHTML(AriaAttributes, pn.pane.HTML):
    """An HTML pane with an id and ARIA attributes on its element."""


class AriaMarkdown(AriaAttributes, pn.pane.Markdown):
    """A Markdown pane with an id and ARIA attributes on its element."""


class AriaRadioBoxGroup(AriaAttributes, pn.widgets.RadioBoxGroup):
    """Radio buttons with ARIA attributes on the group (role=radiogroup, aria-labelledby)."""


def describe_chart(figure, name: str, *described_by: AriaHTML) -> None:
    """Give a Bokeh figure (a canvas: an image to a screen reader) an accessible name and tie it
    to its text alternatives (a summary sentence, the table of its numbers) by aria-describedby.
    The panes get ids if they have none; lay them out in the same Panel layout as the figure."""
    ids = []
    for pane in described_by:
        if not pane.html_id:
            pane.html_id = unique_id("chart-text")
        ids.append(pane.html_id)
    attributes = {"role": "figure", "aria-label": name}  # not "img": its toolbar stays usable
    if ids:
        attributes["aria-describedby"] = " ".join(ids)
    figure.html_attributes = attributes


class ChartText:
    """A chart's text alternative: a one-sentence summary of what was measured (`say()` it when
    the data change) and a table pane for the same numbers, both tied to the figures by
    aria-describedby. Lay out the figures, `summary` and `table` as children of one layout.

        self.text = ChartText("Gaps between tokens over time", fig, table_css="itl-table")
        self._layout = pn.Column(pn.pane.Bokeh(fig), self.text.summary, self.text.table)
        self.text.say("Worst gap 45 ms with the prompt whole, 12 ms in chunks.")
    """

    def __init__(self, name: str, *figures, table_css: str = "chart-table"):
        self.summary = AriaHTML("", css_classes=["chart-summary"], sizing_mode="stretch_width",
                                stylesheets=site_stylesheets())
        self.table = AriaHTML("", css_classes=[table_css], sizing_mode="stretch_width",
                              stylesheets=site_stylesheets())
        self.sentence = ""
        for figure in figures:
            describe_chart(figure, name, self.summary, self.table)

    def say(self, sentence: str) -> None:
        """Set the summary: one sentence, what was measured (with units), as text."""
        self.sentence = sentence
        self.summary.object = (f'<div class="site"><p class="chart-summary">'
                               f"{html.escape(sentence)}</p></div>")


def plain_words(text: str) -> str:
    """What a screen reader should say for a sentence a page shows as Markdown or HTML: tags,
    emphasis marks and list bullets dropped, entities decoded, white space collapsed (the live
    region's text is read as it is, marks and all)."""
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(?m)^\s*[-*]\s+", "", text)
    text = text.replace("**", "").replace("`", "")
    return " ".join(html.unescape(text).split())


class LiveRegion(pn.viewable.Viewer):
    """A polite aria-live region: what it announces, a screen reader reads when the reader
    pauses. Visually hidden (the page shows the same facts). Throttled: within MIN_GAP_S of the
    last announcement, a new message waits, and only the latest waiting one is read."""

    MIN_GAP_S = 2.0

    message = param.String(default="", doc="The last message announced.")

    def __init__(self, **params):
        super().__init__(**params)
        self._pane = AriaHTML("", html_attributes={"role": "status", "aria-live": "polite",
                                                   "aria-atomic": "true"},
                              css_classes=["visually-hidden"], margin=0,
                              sizing_mode="stretch_width",
                              stylesheets=[VISUALLY_HIDDEN_CSS])
        self._last = float("-inf")
        self._pending: str | None = None
        self._flip = False

    @property
    def pending(self) -> str | None:
        """A message waiting for the gap after the last one to pass."""
        return self._pending

    def announce(self, text: str, now: float | None = None) -> None:
        """Announce `text` now, or after the gap if another message was read just before."""
        now = time.monotonic() if now is None else now
        wait = self._last + self.MIN_GAP_S - now
        if wait <= 0:
            self._say(text, now)
            return
        first_waiting = self._pending is None
        self._pending = text
        if first_waiting:
            self._schedule(wait)

    def flush(self, now: float | None = None) -> None:
        """Announce the message that was waiting, if any."""
        if self._pending is not None:
            text, self._pending = self._pending, None
            self._say(text, time.monotonic() if now is None else now)

    def _say(self, text: str, now: float) -> None:
        self._last = now
        # The same words twice in a row are not read again: alternate an invisible difference.
        self._flip = not self._flip if text == self.message else False
        self.message = text
        self._pane.object = html.escape(text) + ("\u00a0" if self._flip else "")

    def _schedule(self, wait_s: float) -> None:
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            return  # no browser: the message stays pending until flush()
        doc.add_timeout_callback(self.flush, int(wait_s * 1000) + 1)

    def __panel__(self):
        return self._pane
