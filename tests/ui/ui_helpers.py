"""Helpers shared by the browser tests: page text through shadow DOMs, console errors."""

from __future__ import annotations

# The text of every page, shadow DOMs included (Panel renders each component in its own).
PAGE_TEXT_JS = """() => {
  const parts = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) parts.push(child.textContent);
      else if (child.nodeType === Node.ELEMENT_NODE && child.tagName !== 'SCRIPT'
               && child.tagName !== 'STYLE') walk(child);
    }
  };
  walk(document.body);
  return parts.join(' ');
}"""



class ConsoleLog:
    """Console errors and uncaught page errors of a page, for the no-error assertions."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"{m.text} ({m.location.get('url') or 'no url'})"))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))



def page_text(page_or_frame) -> str:
    return page_or_frame.evaluate(PAGE_TEXT_JS)
