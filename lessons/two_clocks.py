"""Lesson 1: Two clocks (TTFT and ITL). /app?lesson=two-clocks

The reader sends a prompt; the tiny model streams its answer through the engine's real-time
serving loop (the `two_clocks` job, engine/lab/jobs/generation.py), next to N background requests
when asked. The timeline shows the engine's clock (a tick per token, the silence before the
first one split into queue and prefill) and the browser's own clock (widgets.browser_clock: the
same tokens stamped when they were drawn on the reader's screen). Readouts: TTFT, ITL P50/P99,
per-user tokens/s, and E2E against TTFT + (N - 1) x TPOT.

URL: prompt, context_tokens, background, streamed, max_new_tokens, source
(/app?lesson=two-clocks&background=8&context_tokens=1024).

With an OpenAI-compatible server configured by the teacher (engine.lab.endpoint), the source
choice streams the prompt from it instead (`endpoint_stream`, timed at this app's server): the
first row is then the server's clock as a client sees it, with no split of the wait before the
first token (queue, prefill happen inside the server), and every figure is labelled with the
server's model and host. The document slider and the unstreamed choice are the engine's only.
"""

from __future__ import annotations

import html
import statistics

import numpy as np
import panel as pn
import param

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    compute_bound_prompt,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from engine.calc.stats import ratio_interval, series_estimate, series_estimates
from engine.lab.registry import get_spec
from engine.lab.results import (
    EndpointStreamResult,
    Percentiles,
    ReaderMetrics,
    TwoClocksResult,
)
from widgets.browser_clock import BrowserClock
from widgets.checkpoint import Question, numeric_question
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import provenance
from widgets.phase_bars import PhaseBars
from widgets.readouts import Readouts, table_html
from widgets.tables import UNBOUNDED, interval_text, sig, with_interval
from widgets.token_timeline import TokenTimeline

from .base import LessonPage
from .data_record import Run, result_header
from .endpoint_source import EndpointSource, endpoint_label
from .on_a_gpu import GpuBox, machine_table
from .teaching import BOUND_PRIMER, Lookup, which_is_larger
from .words.two_clocks import (
    INSTRUCTOR,
    INTRO,
    NO_BROWSER_CLOCK,
    OBJECTIVES,
    PHASES,
    PREDICTION,
    PROSE,
    QUESTIONS,
    TAKEAWAY,
)

ENGINE_ROW = "engine"
BROWSER_ROW = "your browser"
DEFAULT_PROMPT = "The engine reads the whole prompt first, and then"
CONTEXT = get_spec("two_clocks").params["context_tokens"]
ARRIVE_AFTER_MS = 300.0  # the background requests' head start, so they are decoding already

GPU_MODEL = LLAMA_3_8B
GPU_PROMPT = 1000  # tokens
MAX_PHASE_BARS = 6  # the reader's latest requests drawn by phase


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 1's finding on each machine: the two clocks' floors for Llama-3-8B."""
    def tpot(m: Machine) -> float:
        return step_floor_ms(decode_step(GPU_MODEL, 1, GPU_PROMPT), m)

    table = machine_table(machines, (
        (f"TTFT of a {GPU_PROMPT:,}-token prompt, at least (ms)",
         lambda m: sig(prefill_floor_ms(GPU_MODEL, m, GPU_PROMPT))),
        ("prefill is compute-bound above (prompt tokens)",
         lambda m: f"{compute_bound_prompt(GPU_MODEL, m):,.0f}"),
        ("TPOT at batch 1, at least (ms)", lambda m: sig(tpot(m))),
        ("one reader's speed, at most (tokens/s)", lambda m: f"{1000 / tpot(m):,.0f}"),
    ), f"{GPU_MODEL.name} in bf16 ({GPU_MODEL.params / 1e9:.2f} B parameters, "
       f"{GPU_MODEL.weight_bytes / 1e9:.1f} GB of weights)")
    return (
        f"<p>The two clocks keep their meaning on a GPU, with other numbers. For {GPU_MODEL.name} "
        "the silence is at least max(2 &times; parameters &times; prompt tokens / peak, weight "
        "bytes / bandwidth): a prompt is compute-bound only once its tokens outnumber the ridge "
        "point (in bf16 a prompt of L tokens does about L FLOPs per byte of weights), so on a "
        "GPU a short chat prompt is memory-bound and costs about one weight read. Each gap is "
        "at least the bytes of a decode step (weights plus the cache) / bandwidth, and 1000 / "
        "that gap is the fastest one reader can be served.</p>" + table)


def clocks_outcome(m: ReaderMetrics | EndpointStreamResult) -> tuple[str, str] | None:
    """Which prediction choice a run supports: its TTFT against its TPOT (25% either way)."""
    ttft, tpot = m.ttft_ms, m.tpot_ms
    if not tpot:
        return None
    choice = which_is_larger(ttft, tpot, 0.25, PREDICTION.choices)
    return choice, f"TTFT {_fmt_ms(ttft)}, TPOT {_fmt_ms(tpot)}"


def e2e_question(m: ReaderMetrics | EndpointStreamResult,
                 who: str = "the engine") -> Question | None:
    """The reader's own run: which E2E did `who` measure, given its TTFT, N and TPOT? The key
    is the measured E2E; the distractors are the usual slips with the same numbers."""
    n, ttft, tpot, e2e = m.output_tokens, m.ttft_ms, m.tpot_ms, m.e2e_ms
    if n < 2 or not tpot:
        return None
    return numeric_question(
        f"Your run: TTFT {ttft:,.0f} ms, {n} tokens, TPOT {tpot:.1f} ms. What E2E did "
        f"{who} measure for your answer?",
        (f"{e2e:,.0f} ms",
         f"E2E = TTFT + (N - 1) x TPOT = {ttft:,.0f} + {n - 1} x {tpot:.1f} = {e2e:,.0f} ms, "
         f"what {who} measured from the last token's time."),
        [(f"{ttft + n * tpot:,.0f} ms",
          f"That is TTFT + N x TPOT: one gap too many; {n} tokens have {n - 1} gaps after the "
          "first."),
         (f"{(n - 1) * tpot:,.0f} ms",
          "That is the gaps alone; the wait for the first token comes on top."),
         (f"{n * tpot:,.0f} ms",
          "That is N x TPOT: it drops the TTFT and counts one gap too many.")])


def itl_readout(itl: Percentiles, times_ms: list[float]) -> tuple[str, str]:
    """The ITL readout and its note: the run's P50 and P99 gap, each with its 95% interval and
    the number of gaps, † on a percentile too few gaps bound (a P99 needs 100; an answer of 48
    tokens has 47). One answer's gaps are one time series, so the interval comes from
    engine.calc.stats.series_estimate (a block bootstrap: neighbouring gaps move together, and
    resampling them one by one would give an interval too narrow)."""
    what = "ITL P50 / P99: gap between tokens"
    if itl.p50 is None:
        return "\u2013", what
    gaps = list(np.diff(times_ms))
    p50, p99 = series_estimates(gaps, (50, 99))  # one set of resamples for both
    note = (f"{what}; [95% interval], n = {p50.n} gaps (a block bootstrap over neighbouring "
            f"gaps)")
    if not p99.bounded:
        note += f"; {UNBOUNDED} too few gaps to bound the P99 (needs {p99.min_n})"
    return f"{with_interval(itl.p50, p50)} / {with_interval(itl.p99, p99)} ms", note


def speed_readout(tokens_per_s: float | None, times_ms: list[float]) -> str:
    """Per-user speed, 1000 / TPOT, with its 95% interval: TPOT is the mean gap, so its
    interval is the block bootstrap's of the mean (as for ITL), its ends swapped."""
    if not tokens_per_s:
        return "\u2013"
    lo, hi = ratio_interval(1000, series_estimate(list(np.diff(times_ms)), None))
    return f"{interval_text(tokens_per_s, lo, hi)} tokens/s"


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


class TwoClocksLesson(EndpointSource, LessonPage):
    """Lesson 1: the reader's prompt streamed by the tiny model, on two clocks."""

    slug = "two-clocks"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    prompt = param.String(default=DEFAULT_PROMPT, label="Your prompt")
    context_tokens = param.Integer(  # up to what the two_clocks job takes
        default=0, bounds=(0, CONTEXT.hi), label="Document before your prompt (tokens)")
    background = param.Integer(
        default=0, bounds=(0, 16), label="Background requests decoding")
    streamed = param.Boolean(default=True, label="Stream the answer token by token")
    max_new_tokens = param.Integer(default=48, bounds=(8, 256), label="Answer length (tokens)")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: TwoClocksResult | EndpointStreamResult | None = None
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
            ("speed", "per-user speed: 1000 / TPOT"),
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
        self.gpu_box = GpuBox(gpu_finding)
        self.phase_bars = PhaseBars(title="Where each of your requests' time went")
        self._phase_rows: list[tuple[str, dict[str, float]]] = []

    # ---- layout ------------------------------------------------------------------------------
    def controls(self) -> pn.Column:
        prompt = pn.widgets.TextAreaInput.from_param(self.param.prompt, rows=3,
                                                     max_length=2000)
        self._engine_only = [  # an endpoint's prompt is the reader's text alone, always streamed
            pn.widgets.IntSlider.from_param(self.param.context_tokens, step=64),
            pn.widgets.Checkbox.from_param(self.param.streamed)]
        widgets = [*self.source_widgets(), prompt, self._engine_only[0],
                   pn.widgets.IntSlider.from_param(self.param.background),
                   pn.widgets.IntSlider.from_param(self.param.max_new_tokens, step=8),
                   self._engine_only[1]]
        self._show_source()
        for w in widgets:
            w.sizing_mode = "stretch_width"
        return pn.Column(*widgets, self.send, sizing_mode="stretch_width",
                         css_classes=["demo-controls"])

    def body(self) -> list:
        return [
            html_pane(INTRO), self.prediction_box,
            html_pane("<h2>Send a prompt</h2>"),
            pn.Row(pn.Column(self.controls(), width=330),
                   pn.Column(self.timeline, self.answer, self.runner.status,
                             sizing_mode="stretch_width"),
                   sizing_mode="stretch_width"),
            html_pane("<h3>The engine's clock</h3>"), self.engine_readouts,
            html_pane("<h3>Your browser's clock</h3>"), self.browser_readouts,
            self.measured_on, html_pane(PHASES), self.phase_bars,
            self.token_table, self.download,
            html_pane(BOUND_PRIMER), html_pane(PROSE), self.gpu_box,
        ]

    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)  # the reader's own prompt is sent with the button

    def export_run(self) -> None:
        """A static copy shows the default prompt streamed, as if the reader had sent it."""
        self.run()

    def static_swaps(self) -> list[tuple[pn.viewable.Viewable, pn.viewable.Viewable]]:
        """The browser's clock stamps tokens as a browser draws them from the live stream; a
        static copy was streamed to no browser, so its readouts say what they would show and
        why they cannot here, and the token table keeps the engine's column alone."""
        self.token_table.object = site_html(self._token_table(None))
        return [(self.browser_readouts.__panel__(), html_pane(NO_BROWSER_CLOCK))]

    @param.depends("source", watch=True)
    def _show_source(self) -> None:
        for w in getattr(self, "_engine_only", []):
            w.visible = not self.measures_endpoint

    # ---- running -----------------------------------------------------------------------------
    def job(self) -> tuple[str, dict]:
        """The built-in engine's two_clocks run, or the prompt streamed from the endpoint."""
        if self.measures_endpoint:
            return "endpoint_stream", {
                "url": self.endpoint.url, "model": self.endpoint.model, "prompt": self.prompt,
                "background": self.background, "max_new_tokens": self.max_new_tokens,
                "arrive_after_ms": ARRIVE_AFTER_MS}
        return "two_clocks", self.job_params()

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
        kind, params = self.job()
        self.shown = Run(kind, params)
        self.answer.object = site_html("<p class='answer'><em>Waiting for the first token: the "
                                       "silence you are timing.</em></p>")
        self.runner.submit(kind, params, self._on_event)

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

    def show_result(self, result: TwoClocksResult | EndpointStreamResult, event=None) -> None:
        """Draw a finished run: ticks not streamed yet, the wait's parts, the readouts."""
        self.result = result
        self.shown = (self.shown or Run(*self.job())).done(result, event)
        if isinstance(result, EndpointStreamResult):
            self.show_endpoint_result(result)
            return
        times = [t.t_ms for t in result.tokens]
        missing = len(times) - len(self._engine_ms)
        if missing > 0:  # not streamed: the whole answer arrives now, in one message
            self._add_tokens(times[-missing:], [t.text for t in result.tokens[-missing:]])
        self.timeline.set_wait(ENGINE_ROW, [("queued", 0.0, result.admitted_ms),
                                            ("prefill", result.admitted_ms,
                                             result.first_token_ms)])
        m = result.metrics
        self._show_clocks(
            m, times, f"TTFT: queued {_fmt_ms(m.queue_ms)} + prefill {_fmt_ms(m.prefill_ms)}",
            f"Answer measured: first token after {_fmt_ms(m.ttft_ms)} (queued "
            f"{_fmt_ms(m.queue_ms)}, prefill {_fmt_ms(m.prefill_ms)}); {m.output_tokens} "
            f"tokens, the whole answer in {_fmt_ms(m.e2e_ms)}.", "the engine")
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(result, event))}. Your prompt: "
            f"{result.prompt_tokens} tokens ({result.text_tokens} of your text, "
            f"{result.context_tokens} of document); {result.background} background "
            f"request{'s' if result.background != 1 else ''}, so each decode step carried "
            f"{result.sequences_per_step:.1f} sequences on average; answer "
            f"{'streamed' if result.stream else 'held until complete'}.</p>")
        self._add_phases(result)
        self._show_browser()

    def _add_phases(self, result: TwoClocksResult) -> None:
        """One more bar: this run's request by phase (the last MAX_PHASE_BARS runs)."""
        if result.phases is None:
            return
        p = result.phases
        label = (f"#{len(self._phase_rows) + 1}: {result.prompt_tokens}-token prompt, "
                 f"{result.metrics.output_tokens} out")
        self._phase_rows.append((label, {
            "tokenize": p.tokenize_ms, "queue": p.queue_ms, "prefill": p.prefill_ms,
            "decode": p.decode_ms, "detokenize": p.detokenize_ms, "other": p.other_ms}))
        self.phase_bars.set(self._phase_rows[-MAX_PHASE_BARS:])

    def _show_clocks(self, m: ReaderMetrics | EndpointStreamResult, times_ms: list[float],
                     ttft_note: str, sentence: str, who: str) -> None:
        """The first clock's readouts, the sentence said, the prediction's verdict and the
        question on the reader's own E2E, from a run's TTFT, ITL, TPOT and E2E and its tokens'
        times (`who` timed them: the engine, or this app's server as a client of an endpoint)."""
        n = m.output_tokens
        formula = m.ttft_ms + (n - 1) * (m.tpot_ms or 0.0)
        itl, itl_note = itl_readout(m.itl_ms, times_ms)
        self.engine_readouts.set(
            ttft=_fmt_ms(m.ttft_ms), itl=itl,
            speed=speed_readout(m.user_tokens_per_s, times_ms),
            e2e=_fmt_ms(m.e2e_ms))
        self.engine_readouts.notes = {
            "ttft": ttft_note, "itl": itl_note,
            "e2e": (f"E2E; TTFT + (N - 1) x TPOT = {m.ttft_ms:.0f} + {n - 1} x "
                    f"{m.tpot_ms or 0:.1f} = {formula:,.0f} ms"),
        }
        self.say(sentence)
        outcome = clocks_outcome(m)
        if outcome is not None:
            self.prediction_box.reveal(*outcome)
        question = e2e_question(m, who)
        if question is not None:
            self.checkpoint.provide("e2e", question)

    def show_endpoint_result(self, result: EndpointStreamResult) -> None:
        """A run streamed from the endpoint: every token came as it was streamed; the wait
        before the first one is one span (its parts are inside the server)."""
        self.timeline.set_wait(ENGINE_ROW, [("waiting", 0.0, result.ttft_ms)])
        label = endpoint_label(result.base_url, result.model)
        self._show_clocks(
            result, [t.t_ms for t in result.tokens],
            "TTFT timed here, at the client: queue and prefill are inside the server",
            f"Answer measured over HTTP from {label}: first token after "
            f"{_fmt_ms(result.ttft_ms)}; {result.output_tokens} tokens, the whole answer in "
            f"{_fmt_ms(result.e2e_ms)}.", "this app's server")
        failed = (f" {result.background_failed} background request(s) failed: "
                  f"{html.escape(result.first_error or '')}." if result.background_failed else "")
        self.measured_on.object = site_html(
            f"<p>Measured over HTTP: <strong>{html.escape(label)}</strong>, timed at this app's "
            f"server (the client, so the network is included; the first row is when each token "
            f"reached it). Your prompt: {result.prompt_tokens} tokens as the server counted "
            f"them; {result.background} background request"
            f"{'s' if result.background != 1 else ''} sent "
            f"{ARRIVE_AFTER_MS if result.background else 0:.0f} ms before it; answer "
            f"streamed.{failed}</p>")
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
        shown = self.shown or Run(*self.job())
        clock = ("(the endpoint, timed at this app: ms since it sent your request)"
                 if shown.kind == "endpoint_stream" else "(ms since your request reached it)")
        return result_header(
            self, shown.kind, shown.params, shown.result, shown.event, "run",
            waits=self.timeline.waits(),
            columns=f"clock: {ENGINE_ROW} {clock} or {BROWSER_ROW} "
                    "(ms since your click, stamped when the token was drawn); token: its index "
                    "in the answer; text: the token (the browser row leaves it empty); ms: when "
                    "it arrived on that clock. waits: the shaded wait before the first token")

    def _token_table(self, browser: list[float] | None) -> str:
        """The first 10 and last 2 tokens on both clocks; on the engine's alone where no browser
        clock ran (`browser` None: a static copy)."""
        n = len(self._engine_ms)
        if n == 0:
            return ""
        shown = list(range(min(n, 10))) + [i for i in range(max(10, n - 2), n)]
        rows = []
        for i in shown:
            e = self._engine_ms[i]
            row = (i, repr(self._texts[i])[1:-1] or " ", f"{e:,.1f}")
            if browser is not None:
                b = browser[i] if i < len(browser) else None
                row += ("\u2013" if b is None else f"{b:,.1f}",
                        "\u2013" if b is None else f"{b - e:,.1f}")
            rows.append(row)
        first = ("server (ms since sent)" if self.measures_endpoint
                 else "engine (ms since arrival)")
        some = f"{n} tokens{', first 10 and last 2' if n > 12 else ''}"
        if browser is None:
            return table_html(("token", "text", first), rows, numeric_from=2,
                              caption=f"The tokens on the engine's clock ({some})")
        return table_html(
            ("token", "text", first, "browser (ms since click)", "browser - engine (ms)"),
            rows, numeric_from=2, caption=f"The same tokens on both clocks ({some})")

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        return ["Measured live for every reader's own prompt, never cached (the point is "
                "watching it arrive): send the default prompt once before class and note its "
                "TTFT and TPOT; with 8 background requests, again."]

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return []  # the reader's own text: nothing to measure in advance
