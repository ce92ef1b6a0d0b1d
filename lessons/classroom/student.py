"""The student page, /app?page=class-student: send prompts into the class run and see one's own
time to first token and gaps between tokens as the tokens arrive, among everyone's.

A page, not a numbered lesson: it works only while the teacher keeps a class run live, so the
course map and the pages that walk every lesson leave it out. The reader's requests carry their
cookie id (lessons.reader_seed), which picks them out in the charts. The engine's events arrive
on the service's thread; they are queued here and drawn on the session's own loop a few times a
second (OWN_FRAME_MS), the class's charts once a second (lessons.classroom.live).
"""

from __future__ import annotations

import html
import statistics
import threading
import time
from dataclasses import dataclass, field

import panel as pn

from widgets.html import html_pane, site_html
from widgets.tables import html_table, sig

from ..reader_seed import reader_seed
from .feed import KNOB_NAMES, describe_change
from .live import LiveClass, served

OWN_FRAME_MS = 250
BURST = 10
DEFAULT_PROMPT = "The function returns a new list"
NOT_LIVE = "No class run is live: the teacher starts it from the console."


@dataclass
class OwnRequest:
    """One of the reader's requests as its events came in."""

    number: int
    prompt: str
    request_id: str | None = None
    state: str = "sent"  # sent | admitted | streaming | finished | dropped
    sent_at: float = field(default_factory=time.monotonic)
    first_at: float | None = None  # monotonic time the first token reached this server
    token_t_s: list[float] = field(default_factory=list)  # engine run time of each token
    text: str = ""
    ttft_ms: float | None = None  # the engine's, once finished (before: this server's clock)
    itl_ms: list[float] = field(default_factory=list)
    reason: str = ""

    def gaps_ms(self) -> list[float]:
        if self.itl_ms:
            return self.itl_ms
        t = self.token_t_s
        return [(b - a) * 1000.0 for a, b in zip(t, t[1:])]

    def shown_ttft_ms(self) -> float | None:
        if self.ttft_ms is not None:
            return self.ttft_ms
        if self.first_at is not None:
            return (self.first_at - self.sent_at) * 1000.0
        return None


def own_row(r: OwnRequest) -> list[str]:
    gaps = r.gaps_ms()
    ttft = r.shown_ttft_ms()
    state = r.reason if r.state == "dropped" else r.state
    return [str(r.number), state, "-" if ttft is None else sig(ttft),
            str(len(r.token_t_s)), sig(statistics.median(gaps)) if gaps else "-",
            sig(max(gaps)) if gaps else "-", r.text[-80:]]


class StudentPage(pn.viewable.Viewer):
    """A prompt box, Send and Send 10 at once, the reader's own requests, the class's charts."""

    def __init__(self, service=None, feed=None, student: str | None = None, max_tokens: int = 32):
        super().__init__()
        self.student = student if student is not None else f"reader-{reader_seed()}"
        self.max_tokens = max_tokens
        self.live = LiveClass(service=service, feed=feed, me=self.student, full=False,
                              on_frame=self.on_frame)
        self.prompt = pn.widgets.TextAreaInput(label="Your prompt", value=DEFAULT_PROMPT,
                                               rows=2, max_length=2000)
        self.send_button = pn.widgets.Button(label="Send", color="primary")
        self.burst_button = pn.widgets.Button(label=f"Send {BURST} at once")
        self.send_button.on_click(lambda _e: self.send(1))
        self.burst_button.on_click(lambda _e: self.send(BURST))
        self.status = html_pane("", css_classes=["class-status"])
        self.message = html_pane("", css_classes=["class-message"])
        self.changes = html_pane("", css_classes=["class-changes"])
        self.own = html_pane("", css_classes=["own-requests"])
        self.requests: list[OwnRequest] = []
        self._events: list[tuple[OwnRequest, dict]] = []
        self._lock = threading.Lock()
        self.on_frame()
        self.draw_own()

    # ---- sending ---------------------------------------------------------------------------
    def send(self, count: int = 1) -> list[OwnRequest]:
        """Send `count` copies of the prompt into the class run; say why when one is refused."""
        text = (self.prompt.value_input or self.prompt.value or "").strip()
        if not text:
            self._say("Write a prompt first.")
            return []
        cap = self.live.feed.settings.get("max_tokens")  # the run's own cap, if lower
        tokens = min(self.max_tokens, int(cap)) if cap else self.max_tokens
        sent: list[OwnRequest] = []
        refused = ""
        for _ in range(count):
            own = OwnRequest(number=len(self.requests) + 1, prompt=text)
            answer = self.live.service.class_send(self.student, text, tokens,
                                                  lambda event, own=own: self._receive(own, event))
            if not answer.get("ok"):
                refused = str(answer.get("reason") or "The class run refused it.")
                break  # the same bound refuses the rest
            own.request_id = str(answer.get("request_id"))
            self.requests.append(own)
            sent.append(own)
        if sent:
            said = (f"Sent {len(sent)} request{'s' if len(sent) > 1 else ''}; the table below "
                    "fills in as the tokens arrive.")
            self._say(said + (f" The other {count - len(sent)} were not sent: {refused}"
                              if refused else ""))
        elif refused:
            self._say(refused)
        self.draw_own()
        return sent

    def _receive(self, own: OwnRequest, event: dict) -> None:
        """On the service's thread: queue the event for the session's loop."""
        now = time.monotonic()
        with self._lock:
            if event.get("type") == "token" and own.first_at is None:
                own.first_at = now
            self._events.append((own, dict(event)))

    def apply_events(self) -> int:
        """Apply the queued events to the reader's requests; how many there were."""
        with self._lock:
            events, self._events = self._events, []
        for own, e in events:
            kind = e.get("type")
            if kind == "admitted":
                own.state = "admitted"
            elif kind == "token":
                own.state = "streaming"
                own.text += str(e.get("text", ""))
                own.token_t_s.append(float(e.get("t_s") or 0.0))
            elif kind == "finished":
                own.state = "finished"
                own.ttft_ms = e.get("ttft_ms")
                own.itl_ms = [float(g) for g in e.get("itl_ms") or []]
            elif kind == "dropped":
                own.state, own.reason = "dropped", f"dropped: {e.get('reason', '')}"
        return len(events)

    def own_tick(self) -> None:
        if self.apply_events():
            self.draw_own()

    # ---- drawing ---------------------------------------------------------------------------
    def draw_own(self) -> None:
        rows = [own_row(r) for r in reversed(self.requests[-30:])]
        table = html_table(
            "Your requests, newest first (TTFT: the engine's once finished, before that the "
            "time until this server had your first token)",
            ["#", "state", "TTFT (ms)", "tokens", "median gap (ms)", "longest gap (ms)",
             "text so far"], rows, numeric=[True, False, True, True, True, True, False]) \
            if rows else "<p>You have sent nothing yet.</p>"
        self.own.object = site_html(table)

    def on_frame(self) -> None:
        feed = self.live.feed
        if feed.active:
            s = feed.settings
            knobs = {k: s[k] for k in KNOB_NAMES if k in s}
            line = f"The class run is live ({feed.t_s:.0f} s): {describe_change(knobs)}."
        else:
            line = NOT_LIVE
        self.status.object = site_html(f"<p>{html.escape(line, quote=False)}</p>")
        changes = feed.changes()
        if changes:
            items = "".join(f"<li>At {c['t_s']:.1f} s the teacher changed: "
                            f"{html.escape(describe_change(c.get('changes') or {}), False)}</li>"
                            for c in reversed(changes))
            self.changes.object = site_html(f"<h2>What the teacher changed</h2><ul>{items}</ul>")
        else:
            self.changes.object = site_html("<h2>What the teacher changed</h2>"
                                            "<p>Nothing yet.</p>")

    def _say(self, text: str) -> None:
        self.message.object = site_html(f'<p role="status">{html.escape(text, quote=False)}</p>')

    def start(self) -> None:
        self.live.start_frames()
        pn.state.add_periodic_callback(self.own_tick, period=OWN_FRAME_MS)

    def __panel__(self):
        if served():
            pn.state.onload(self.start)
        return pn.Column(
            html_pane("<h1>The class run: your requests</h1><p>Your prompts join one engine "
                      "run with everyone's in the room. Send one, or ten at once, and watch how "
                      "long your first token takes and the gaps between the next ones, beside "
                      "everyone's (yours are in orange: hatched in the histograms).</p>"),
            self.status, self.prompt, pn.Row(self.send_button, self.burst_button), self.message,
            self.own, self.changes, self.live, sizing_mode="stretch_width")
