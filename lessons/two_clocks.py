"""Lesson 1: Two clocks (TTFT and ITL). /app?lesson=two-clocks

The reader sends a prompt; the tiny model streams its answer through the engine's real-time
serving loop (the `two_clocks` job, engine/lab/jobs/generation.py), next to N background requests
when asked. The timeline shows the engine's clock (a tick per token, the silence before the
first one split into queue and prefill) and the browser's own clock (widgets.browser_clock: the
same tokens stamped when they were drawn on the reader's screen). Readouts: TTFT, ITL P50/P99,
per-user tokens/s, and E2E against TTFT + (N - 1) x TPOT.

URL: prompt, context_tokens, background, streamed, max_new_tokens
(/app?lesson=two-clocks&background=8&context_tokens=1024).
"""

from __future__ import annotations

import html
import statistics

import numpy as np
import panel as pn
import param

from engine.lab.registry import get_spec
from engine.lab.results import TwoClocksResult
from widgets.browser_clock import BrowserClock
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import provenance
from widgets.readouts import Readouts, table_html
from widgets.token_timeline import TokenTimeline

from .base import LessonPage
from .data_record import Run, result_header

ENGINE_ROW = "engine"
BROWSER_ROW = "your browser"
DEFAULT_PROMPT = "The engine reads the whole prompt first, and then"
CONTEXT = get_spec("two_clocks").params["context_tokens"]
ARRIVE_AFTER_MS = 300.0  # the background requests' head start, so they are decoding already

INTRO = """
<p>Watch a chatbot answer and you meet two different waits. First a silence: nothing happens.
Then the words come at a steady beat. They are two clocks, driven by two different kinds of
work, and a busy server can slow one down while the other stays put.</p>
<p>Send a prompt to the tiny model below. It runs on this machine, in the engine's own worker
process, and every number on this page is measured while it answers you. The model is small and
was trained here on Python's documentation and a few public-domain books, so expect
documentation-flavoured sentences rather than a conversation: what matters is when its tokens
arrive.</p>
"""

PROSE = """
<h2>The silence is prefill</h2>
<p>Before the model can write anything it has to read your whole prompt. It reads all of the
prompt's tokens in one pass: large matrix multiplications that keep the processor's arithmetic
units busy (<em>compute-bound</em> work). The time from your request's arrival to its first
token is the <a href="app?page=vocabulary#ttft">TTFT</a>, time to first token: the time spent
waiting for a turn (queue) plus that one prefill pass. Slide the document length up and the
silence grows, while the beat after it hardly changes.</p>

<h2>The beat is decode</h2>
<p>After the first token the model writes one token per step. A step produces just one new token
for each request in it, yet it has to read every weight of the model from memory to do so:
little arithmetic, a lot of memory traffic (<em>memory-bound</em> work). The gap between two
tokens of one answer is the <a href="app?page=vocabulary#itl">ITL</a>, inter-token latency.
Add background requests: they share every step with yours, each step has more to do, and your
gaps widen, while the silence barely moves.</p>

<h2>One formula ties the clocks together</h2>
<p>The whole answer takes E2E = TTFT + (N &minus; 1) &times; TPOT, where N is the number of
tokens and <a href="app?page=vocabulary#tpot">TPOT</a> is the average gap after the first
token. Seen by one user, 1000 / ITL in milliseconds is their reading speed in tokens per second.
</p>

<h2>Streamed or not</h2>
<p>Untick <em>Stream the answer</em> and the server holds the tokens back until the answer is
complete, as an API call that returns one JSON object does. The engine does the same work, but
now you feel only the end-to-end time: the whole answer lands at once. An agent waiting for a
complete answer lives on E2E alone.</p>

<h2>Two clocks, two places</h2>
<p>The engine stamps each token the moment its step finishes. Your browser stamps the same token
when it has drawn it on your screen. The difference is everything outside the model: your click
travelling to the server, waiting for the engine worker (other readers' jobs run first; with
background load your request also starts after the background requests' head start), the
tokens travelling back, and the drawing. Servers report the first clock, often as
"inference time"; people live on the second, the end-to-end time.</p>
"""


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "\u2013"
    return f"{value:,.0f} ms" if abs(value) >= 100 else f"{value:.1f} ms"


def browser_summary(engine_ms: list[float], browser_ms: list[float]) -> dict:
    """Compare the two clocks for the tokens both have: the browser's first and last token
    times (ms since the click), its gaps, and each token's delivery lag: its browser - engine
    offset minus the smallest offset of any token (0 for the token delivered fastest)."""
    n = min(len(engine_ms), len(browser_ms))
    if n == 0:
        return {}
    engine, browser = engine_ms[:n], browser_ms[:n]
    gaps = np.diff(browser) if n > 1 else np.array([])
    offsets = [b - e for e, b in zip(engine, browser)]
    lags = [o - min(offsets) for o in offsets]  # 0 for the token delivered fastest
    return {
        "tokens": n,
        "first_ms": browser[0],
        "last_ms": browser[-1],
        "outside_ms": browser[0] - engine[0],
        "gap_p50": float(np.percentile(gaps, 50)) if gaps.size else None,
        "gap_p99": float(np.percentile(gaps, 99)) if gaps.size else None,
        "lag_p50": statistics.median(lags),
        "lag_max": max(lags),
    }


class TwoClocksLesson(LessonPage):
    """Lesson 1: the reader's prompt streamed by the tiny model, on two clocks."""

    slug = "two-clocks"

    prompt = param.String(default=DEFAULT_PROMPT, label="Your prompt")
    context_tokens = param.Integer(  # up to what the two_clocks job takes
        default=0, bounds=(0, CONTEXT.hi), label="Document before your prompt (tokens)")
    background = param.Integer(
        default=0, bounds=(0, 16), label="Background requests decoding")
    streamed = param.Boolean(default=True, label="Stream the answer token by token")
    max_new_tokens = param.Integer(default=48, bounds=(8, 256), label="Answer length (tokens)")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: TwoClocksResult | None = None
        self.shown: Run | None = None  # the run the timeline draws, for its download
        self._engine_ms: list[float] = []
        self._texts: list[str] = []
        self.timeline = TokenTimeline(
            rows=[ENGINE_ROW, BROWSER_ROW], height=190,
            x_label="ms (engine: since your request reached it; browser: since your click)")
        self.clock = BrowserClock(watch=self.timeline.sources[ENGINE_ROW],
                                  into=self.timeline.sources[BROWSER_ROW], row=BROWSER_ROW)
        self.clock.param.watch(lambda _e: self._show_browser(), "stamps_ms")
        self.send = pn.widgets.Button(label="Send", color="primary", width=120)
        self.clock.attach_start(self.send)
        self.send.on_click(lambda _e: self.run())
        self.answer = html_pane("<p class='answer'><em>The answer appears here.</em></p>",
                                css_classes=["answer"])
        self.engine_readouts = Readouts([
            ("ttft", "TTFT: arrival to first token"),
            ("itl", "ITL P50 / P99: gap between tokens"),
            ("speed", "per-user speed: 1000 / ITL P50"),
            ("e2e", "E2E: arrival to last token"),
        ])
        self.browser_readouts = Readouts([
            ("first", "first token on your screen, from your click"),
            ("last", "last token on your screen, from your click"),
            ("outside", "outside the engine: browser first token - engine TTFT"),
            ("lag", "delivery lag P50 / max: how much later than the fastest-delivered token"),
        ])
        self.measured_on = html_pane("", css_classes=["measurement-label"])
        self.token_table = html_pane("", css_classes=["token-table"])
        self.download = DataDownload("token-timeline", self.timeline.tick_rows,
                                     self.download_header, "The timeline's tokens")

    # ---- layout ------------------------------------------------------------------------------
    def controls(self) -> pn.Column:
        prompt = pn.widgets.TextAreaInput.from_param(self.param.prompt, rows=3,
                                                     max_length=2000)
        widgets = [prompt,
                   pn.widgets.IntSlider.from_param(self.param.context_tokens, step=64),
                   pn.widgets.IntSlider.from_param(self.param.background),
                   pn.widgets.IntSlider.from_param(self.param.max_new_tokens, step=8),
                   pn.widgets.Checkbox.from_param(self.param.streamed)]
        for w in widgets:
            w.sizing_mode = "stretch_width"
        return pn.Column(*widgets, self.send, sizing_mode="stretch_width",
                         css_classes=["demo-controls"])

    def body(self) -> list:
        return [
            html_pane(INTRO),
            pn.Row(pn.Column(self.controls(), width=330),
                   pn.Column(self.timeline, self.answer, self.runner.status,
                             sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            html_pane("<h3>The engine's clock</h3>"), self.engine_readouts,
            html_pane("<h3>Your browser's clock</h3>"), self.browser_readouts,
            self.measured_on, self.token_table, self.download,
            html_pane(PROSE),
        ]

    # ---- running -----------------------------------------------------------------------------
    def job_params(self) -> dict:
        return {"prompt": self.prompt, "context_tokens": self.context_tokens,
                "background": self.background, "max_new_tokens": self.max_new_tokens,
                "stream": self.streamed, "arrive_after_ms": ARRIVE_AFTER_MS}

    def run(self) -> None:
        """Send the prompt: a fresh run on both clocks."""
        self.result = None
        self._engine_ms, self._texts = [], []
        self.timeline.clear()
        self.clock.reset()
        self.engine_readouts.clear()
        self.browser_readouts.clear()
        self.token_table.object = site_html("")
        self.measured_on.object = site_html("")
        self.shown = Run("two_clocks", self.job_params())
        self.answer.object = site_html("<p class='answer'><em>Waiting for the first token: the "
                                       "silence you are timing.</em></p>")
        self.runner.submit("two_clocks", self.job_params(), self._on_event)

    def _on_event(self, event) -> None:
        if event.type == "token":
            self._add_tokens([event.data["t_ms"]], [event.data["text"]])
            if event.data["index"] == 0:
                self.engine_readouts.set(ttft=_fmt_ms(event.data["t_ms"]))
            self.runner.status.job_progress(event.data["index"] + 1, self.max_new_tokens,
                                            "streaming tokens")
        elif event.type == "request" and event.data.get("kind") == "admitted":
            self.timeline.set_wait(ENGINE_ROW, [("queued", 0.0, event.data["t_ms"])])
        elif event.type == "result":
            self.show_result(event.result, event)
        elif event.type == "error":
            self.answer.object = site_html("<p class='answer'><em>No answer: see the message "
                                           "above.</em></p>")

    def _add_tokens(self, times_ms: list[float], texts: list[str]) -> None:
        self.timeline.add_ticks(ENGINE_ROW, times_ms, texts)
        self._engine_ms.extend(times_ms)
        self._texts.extend(texts)
        self.answer.object = site_html(
            f"<p class='answer'>{html.escape(self.prompt)}<strong>"
            f"{html.escape(''.join(self._texts))}</strong></p>")

    def show_result(self, result: TwoClocksResult, event=None) -> None:
        """Draw a finished run: ticks not streamed yet, the wait's parts, the readouts."""
        self.result = result
        self.shown = (self.shown or Run("two_clocks", self.job_params())).done(result, event)
        times = [t.t_ms for t in result.tokens]
        missing = len(times) - len(self._engine_ms)
        if missing > 0:  # not streamed: the whole answer arrives now, in one message
            self._add_tokens(times[-missing:], [t.text for t in result.tokens[-missing:]])
        self.timeline.set_wait(ENGINE_ROW, [("queued", 0.0, result.admitted_ms),
                                            ("prefill", result.admitted_ms,
                                             result.first_token_ms)])
        m = result.metrics
        n = m.output_tokens
        itl = m.itl_ms
        formula = m.ttft_ms + (n - 1) * (m.tpot_ms or 0.0)
        self.engine_readouts.set(
            ttft=_fmt_ms(m.ttft_ms),
            itl=f"{itl.p50:.1f} / {itl.p99:.1f} ms" if itl.p50 is not None else "\u2013",
            speed=f"{m.user_tokens_per_s:.0f} tokens/s" if m.user_tokens_per_s else "\u2013",
            e2e=_fmt_ms(m.e2e_ms))
        self.engine_readouts.notes = {
            "ttft": f"TTFT: queued {_fmt_ms(m.queue_ms)} + prefill {_fmt_ms(m.prefill_ms)}",
            "e2e": (f"E2E; TTFT + (N - 1) x TPOT = {m.ttft_ms:.0f} + {n - 1} x "
                    f"{m.tpot_ms or 0:.1f} = {formula:,.0f} ms"),
        }
        self.say(f"Answer measured: first token after {_fmt_ms(m.ttft_ms)} (queued "
                 f"{_fmt_ms(m.queue_ms)}, prefill {_fmt_ms(m.prefill_ms)}); {n} tokens, the "
                 f"whole answer in {_fmt_ms(m.e2e_ms)}.")
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(result, event))}. Your prompt: "
            f"{result.prompt_tokens} tokens ({result.text_tokens} of your text, "
            f"{result.context_tokens} of document); {result.background} background "
            f"request{'s' if result.background != 1 else ''}, so each decode step carried "
            f"{result.sequences_per_step:.1f} sequences on average; answer "
            f"{'streamed' if result.stream else 'held until complete'}.</p>")
        self._show_browser()

    def _show_browser(self) -> None:
        stamps = self.clock.stamps_ms
        browser = [stamps[i] for i in range(len(stamps)) if i in stamps]
        summary = browser_summary(self._engine_ms, browser)
        if summary:
            self.browser_readouts.set(
                first=_fmt_ms(summary["first_ms"]), last=_fmt_ms(summary["last_ms"]),
                outside=_fmt_ms(summary["outside_ms"]),
                lag=f"{summary['lag_p50']:.0f} / {summary['lag_max']:.0f} ms")
        self.token_table.object = site_html(self._token_table(browser))

    def download_header(self) -> dict:
        shown = self.shown or Run("two_clocks", self.job_params())
        return result_header(
            self, shown.kind, shown.params, shown.result, shown.event, "run",
            waits=self.timeline.waits(),
            columns=f"clock: {ENGINE_ROW} (ms since your request reached it) or {BROWSER_ROW} "
                    "(ms since your click, stamped when the token was drawn); token: its index "
                    "in the answer; text: the token (the browser row leaves it empty); ms: when "
                    "it arrived on that clock. waits: the shaded wait before the first token")

    def _token_table(self, browser: list[float]) -> str:
        n = len(self._engine_ms)
        if n == 0:
            return ""
        shown = list(range(min(n, 10))) + [i for i in range(max(10, n - 2), n)]
        rows = []
        for i in shown:
            b = browser[i] if i < len(browser) else None
            e = self._engine_ms[i]
            rows.append((i, repr(self._texts[i])[1:-1] or " ", f"{e:,.1f}",
                         "\u2013" if b is None else f"{b:,.1f}",
                         "\u2013" if b is None else f"{b - e:,.1f}"))
        return table_html(
            ("token", "text", "engine (ms since arrival)", "browser (ms since click)",
             "browser - engine (ms)"), rows, numeric_from=2,
            caption=f"The same tokens on both clocks ({n} tokens"
                    f"{', first 10 and last 2' if n > 12 else ''})")

    # ---- checkpoint -----------------------------------------------------------------------
    def questions(self) -> list:
        return [
            Question("You paste a long document in front of your question. Which clock moves?",
                     (Choice("The time to the first token", True,
                             "Prefill reads every prompt token before the first output token "
                             "exists, so a longer prompt means a longer silence. The gaps "
                             "after it are decode steps, one token each, and barely change."),
                      Choice("The gap between tokens", False,
                             "Each decode step still makes one token for your request; the "
                             "document was read once, during prefill, before the first token."),
                      Choice("Both, in proportion", False,
                             "Try it with the slider: the silence grows, the beat stays. The "
                             "two clocks are driven by different work."))),
            Question("Ten other people start chatting on the same server. What happens to the "
                     "gaps between your tokens?",
                     (Choice("They grow: every decode step now carries their tokens too", True,
                             "Each step does work for everyone in the batch, so a step takes "
                             "longer and your next token waits for it."),
                      Choice("They shrink, because batching is efficient", False,
                             "Batching raises the server's total tokens per second; each "
                             "user's own gaps get longer, not shorter."),
                      Choice("Nothing: each user has a slot of their own", False,
                             "They share the same steps on the same processor; the "
                             "background-load slider shows the cost."))),
            Question("An agent asks for a whole JSON answer, not streamed. Which number does it "
                     "feel?",
                     (Choice("E2E, arrival to last token", True,
                             "Without streaming nothing arrives until the last token, so the "
                             "first-token time is invisible to it."),
                      Choice("TTFT", False,
                             "The first token is held back with the rest: the agent sees "
                             "nothing until the whole answer is done."),
                      Choice("ITL", False,
                             "The gaps still happen inside the server, but the agent only sees "
                             "their sum, at the end."))),
            Question("TTFT is 200 ms, the answer has 101 tokens and TPOT is 20 ms. About how "
                     "long is E2E?",
                     (Choice("2.2 seconds", True, "200 + (101 - 1) x 20 = 2,200 ms."),
                      Choice("2.02 seconds", False,
                             "That counts 101 gaps of 20 ms minus the first; there are 100 "
                             "gaps after the first token: 200 + 100 x 20 = 2,200 ms."),
                      Choice("20.2 seconds", False,
                             "20 ms is per token, not per ten tokens: 200 + 100 x 20 ms = "
                             "2.2 s."))),
            Question("Your browser saw the first token later than the engine's TTFT. Why?",
                     (Choice("The request and the token had to travel, wait and be drawn", True,
                             "The engine's clock starts when your request reaches it and stops "
                             "when the step ends; your click's trip, the queue for the worker, "
                             "the trip back and the drawing all come on top."),
                      Choice("The browser's clock runs slower", False,
                             "Both clocks tick at the same rate; they start at different "
                             "moments and stop at different places."),
                      Choice("The engine rounds its times down", False,
                             "The engine reads a high-resolution clock after each step "
                             "finished; the difference is real time spent outside it."))),
        ]

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return []  # the reader's own text: nothing to measure in advance
