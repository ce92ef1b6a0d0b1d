"""Helpers shared by the browser tests: page text through shadow DOMs, console errors."""

from __future__ import annotations

from bench.web.served_app import PAGE_TEXT_JS as TEXT_JS  # the benches read a page's text alike


class ConsoleLog:
    """Console errors and uncaught page errors of a page, for the no-error assertions."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"{m.text} ({m.location.get('url') or 'no url'})"))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))



def page_text(page_or_frame) -> str:
    return page_or_frame.evaluate(TEXT_JS, None)


def element_text(locator) -> str:
    """The text of the element a locator finds, its shadow DOM included."""
    return locator.evaluate(TEXT_JS)


# Everything polite live regions (role=status) say, in order, kept in window.__said: Panel and
# Bokeh render into shadow roots, so every shadow root is watched as it is attached. A test asks
# whether something was said, not what the region holds at that moment (the region throttles, and
# a later message replaces an earlier one after a short gap).
RECORD_LIVE_JS = """(() => {
  window.__said = [];
  const region = (node) => {
    for (let n = node; n; n = n.parentNode || n.host) {
      if (n.getAttribute && n.getAttribute('role') === 'status'
          && n.getAttribute('aria-live') === 'polite') return n;
    }
    return null;
  };
  const words = (root) => {  // its text, not its stylesheets'
    let text = '';
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const parent = walker.currentNode.parentNode.nodeName;
      if (parent !== 'STYLE' && parent !== 'SCRIPT') text += walker.currentNode.textContent;
    }
    return text.trim();
  };
  const record = (mutations) => {
    for (const m of mutations) {
      const el = region(m.target);
      if (!el) continue;
      const text = words(el.shadowRoot || el);
      if (text && window.__said[window.__said.length - 1] !== text) window.__said.push(text);
    }
  };
  const watch = (root) => new MutationObserver(record).observe(
      root, {subtree: true, childList: true, characterData: true});
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    const root = attach.call(this, init);
    watch(root);
    return root;
  };
  document.addEventListener('DOMContentLoaded', () => watch(document.body));
})();"""

SAID_JS = "(pattern) => window.__said.some(text => new RegExp(pattern).test(text))"


def record_live_regions(page) -> None:
    """From the next page load on, keep what the page's live regions say (see said_so)."""
    page.add_init_script(RECORD_LIVE_JS)


def said_so(page, pattern: str, timeout_ms: float = 10_000) -> None:
    """Wait until a live region has said something matching `pattern` (a JS regular
    expression); fails with what was said."""
    try:
        page.wait_for_function(SAID_JS, arg=pattern, timeout=timeout_ms)
    except Exception as error:
        said = page.evaluate("() => window.__said")
        raise AssertionError(f"no live region said /{pattern}/; they said: {said}") from error


SKIP_PREDICTION = "Skip the prediction and measure"


def skip_prediction(page_or_frame) -> None:
    """A lesson measures nothing fresh until the reader predicts or skips: skip."""
    page_or_frame.get_by_role("button", name=SKIP_PREDICTION).click()
