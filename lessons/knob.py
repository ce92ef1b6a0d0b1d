"""Lesson 4: The knob (batch size). /app?lesson=knob

A batch-size slider from 1 to 64. Each position the reader releases it at is measured by the
engine (the `sweep_point` job: a batch sharing one prompt, prefilled once and copied into each
member's own cache blocks, then decoded together, the median decode step timed; a batched
prefill of 64 prompts was most of a point's time on a CPU, and the decode steps are the same
work either way) or taken from the measurement cache, labelled so. Points build
the curve (widgets.throughput_curve): total tokens/s and each user's ms per token, with a "you
are here" marker and the marginal gain of the last doubling. A preset picker (mini by default,
whose weights are several times a server CPU's last-level cache, so every step streams them from
memory; tiny, which fits in the cache; small) and the device are named next to the numbers. The
words are lessons.words.knob; the curve's analysis is engine.calc.batch_curve.

URL: batch_size, preset, prompt_len, new_tokens (/app?lesson=knob&batch_size=16&preset=small),
source.

With an OpenAI-compatible server configured by the teacher (engine.lab.endpoint), the source
choice turns the knob into concurrency: N clients streaming at once from that server (the
`endpoint_concurrency` job, timed at the client), whose batch size is its own; the points are
labelled with its model and host.

Its words are in lessons/words/knob.py, what it says of its points in lessons/knob_findings.py
and the curve's analysis in engine.calc.batch_curve; this module is its view.
"""

from __future__ import annotations

import dataclasses
import html

import panel as pn
import param

from engine.calc.batch_ladder import LADDER
from engine.lab import registry
from engine.lab.results import EndpointConcurrencyResult, SweepPointResult
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import RANDOM_WEIGHTS, provenance
from widgets.pareto_chart import ParetoChart
from widgets.readouts import Readouts, table_html
from widgets.throughput_curve import ThroughputCurve

from .base import LessonPage
from .data_record import data_header, origin_text
from .endpoint_source import EndpointSource, endpoint_label
from .knob_findings import (
    DOWNLOAD_COLUMNS,
    Point,
    against_one,
    doubling,
    doubling_question,
    gpu_finding,
    growth_outcome,
    pareto_point,
    point_of,
    warmup_steps,
)
from .on_a_gpu import GpuBox
from .teaching import BOUND_PRIMER, Lookup
from .words.knob import (
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PARETO,
    PREDICTION,
    PROSE,
    QUESTIONS,
    TAKEAWAY,
)

# Short prompts and answers keep the largest default point (mini, batch 64: 1,024 prompt tokens
# to prefill, then 15 decode steps) inside the class queue's bound (engine.lab.registry); the
# weight read every step makes does not depend on them.
DEFAULT_PRESET = "mini"
DEFAULT_PROMPT_LEN = 16
DEFAULT_NEW_TOKENS = 16

class KnobLesson(EndpointSource, LessonPage):
    """Lesson 4: throughput and per-user speed against batch size, measured point by point."""

    slug = "knob"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS
    shows_nearby = True  # a cached point of another batch size, drawn while this one waits

    batch_size = param.Integer(default=8, bounds=(1, 64), label="Batch size")
    preset = param.Selector(default=DEFAULT_PRESET, objects=["mini", "tiny", "small"],
                            label="Model preset",
                            doc="mini: 130 MB of weights, several times a server CPU's last-level "
                                "cache (random weights: timing only); tiny: the course's trained "
                                "model, small enough to stay in the cache; small: about "
                                "GPT-2-small size (random weights: timing only).")
    prompt_len = param.Integer(default=DEFAULT_PROMPT_LEN, bounds=(8, 512),
                               label="Prompt tokens per request")
    new_tokens = param.Integer(default=DEFAULT_NEW_TOKENS, bounds=(4, 128),
                               label="New tokens per request")

    def __init__(self, **params):
        super().__init__(**params)
        self.curve = ThroughputCurve(max_batch=64)
        self.points: dict[tuple, dict[int, Point]] = {}  # settings -> batch -> its point
        self.device = ""
        self.readouts = Readouts([
            ("tput", "total tokens/s, all users"), ("tpot", "ms per token, each user"),
            ("users", "tokens/s each user (1000 / ms per token)"),
        ])
        self.gain = html_pane("", css_classes=["doubling"])
        self.table = self.curve.text.table  # under the curve: its text alternative
        self.measured_on = html_pane("", css_classes=["measurement-label"])
        self.download = DataDownload("batch-size-curve", self.download_rows,
                                     self.download_header, "The curve's points")
        self.pareto = ParetoChart(setting="batch size")
        self.pareto_download = DataDownload(
            "batch-size-pareto", self.pareto.points, self.download_header,
            "The frontier chart's points")
        self.gpu_box = GpuBox(gpu_finding)
        self.param.watch(self._moved, ["batch_size"])
        self.param.watch(self._reset, ["preset", "prompt_len", "new_tokens", "source"])

    def settings(self) -> tuple:
        server = "endpoint" if self.measures_endpoint else self.preset
        return (server, int(self.prompt_len), int(self.new_tokens))

    @property
    def knob(self) -> str:
        """What the slider sets: the engine's batch size, or an endpoint's concurrent clients."""
        return "concurrency" if self.measures_endpoint else "batch_size"

    @property
    def knob_word(self) -> str:
        return "clients" if self.measures_endpoint else "batch"

    def job(self, batch: int) -> tuple[str, dict]:
        if self.measures_endpoint:
            return "endpoint_concurrency", {
                "url": self.endpoint.url, "model": self.endpoint.model, "concurrency": batch,
                "prompt_len": int(self.prompt_len), "new_tokens": int(self.new_tokens)}
        return "sweep_point", self.job_params(batch)

    def job_params(self, batch: int | None = None) -> dict:
        return {"preset": self.preset, "batch_size": int(batch or self.batch_size),
                "prompt_len": int(self.prompt_len), "new_tokens": int(self.new_tokens),
                "shared_prompt": True}

    @property
    def measured(self) -> dict[int, Point]:
        return self.points.setdefault(self.settings(), {})

    def body(self) -> list:
        self.slider = pn.widgets.IntSlider.from_param(self.param.batch_size,
                                                      sizing_mode="stretch_width")
        self.slider.param.watch(lambda _e: self.measure(), "value_throttled")
        self.preset_choice = pn.widgets.RadioButtonGroup.from_param(
            self.param.preset, color="primary", variant="outline")
        self._show_knob()
        advanced = pn.Card(pn.widgets.IntSlider.from_param(self.param.prompt_len, step=8),
                           pn.widgets.IntSlider.from_param(self.param.new_tokens, step=4),
                           title="Measurement settings", collapsed=True,
                           sizing_mode="stretch_width")
        return [
            html_pane(INTRO), self.prediction_box,
            html_pane("<h2>Turn the knob</h2>"),
            pn.Row(pn.Column(*self.source_widgets(), self.slider, self.preset_choice, advanced,
                             self.readouts,
                             width=330),
                   pn.Column(self.curve, self.runner.status, self.gain,
                             sizing_mode="stretch_width"), sizing_mode="stretch_width"),
            self.measured_on, self.download,
            html_pane(BOUND_PRIMER), html_pane(PROSE), html_pane(PARETO), self.pareto,
            self.pareto_download, self.gpu_box,
        ]

    # ---- measuring --------------------------------------------------------------------------
    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.measure()

    def wanted(self) -> list[int]:
        """The batch sizes the readouts need now: here, half of it, and 1."""
        b = int(self.batch_size)
        return list(dict.fromkeys([b, *([b // 2, 1] if b > 1 else [])]))

    def measure(self) -> None:
        """Measure (or fetch from the cache) the points the current position needs: the
        slider's own first, the others (half of it, and 1) as its context, in the background
        (engine.lab.job_queue rule 1): as equals, a class's three points a release keep the
        worker busy with points, a released point behind other readers' context. A queued point
        whose part has changed (the slider's point is now context, or the other way round) is
        asked again in its new part."""
        if not self.started:
            return  # points are measured once the page has loaded
        wanted, knob, here = self.wanted(), self.knob, int(self.batch_size)
        self.runner.cancel(keep=lambda job: job.state == "running"
                           or (job.params.get(knob) in wanted
                               and job.params.get("preset") == self.preset
                               and job.background == (job.params.get(knob) != here)))
        self._moved()
        pending = {job.params.get(knob) for job in self.runner.jobs}
        for batch in wanted:
            if batch in self.measured or batch in pending:
                continue
            settings = self.settings()
            kind, params = self.job(batch)
            self.runner.add(kind, params, lambda e, s=settings: self._on_event(e, s),
                            background=batch != here)

    def _on_event(self, event, settings: tuple) -> None:
        if event.type == "result" or (event.type == "nearby" and self._on_curve(event.near)):
            self.add_result(event.result, event, settings)

    def _on_curve(self, near: dict | None) -> bool:
        """Whether a nearby point belongs on this curve: every setting the same but the batch
        size. It is a cached measurement of its own batch size, drawn as one."""
        if not near or "batch_size" not in near:
            return False
        return near == registry.normalize("sweep_point", self.job_params(near["batch_size"]))

    def add_result(self, point: SweepPointResult | EndpointConcurrencyResult, event=None,
                   settings: tuple | None = None) -> None:
        if isinstance(point, EndpointConcurrencyResult):
            self.add_endpoint_result(point, settings)
            return
        settings = settings or self.settings()
        cached = bool(event is not None and event.cached)
        origin = "cached" if cached else "measured live"
        if event is not None and event.measured_at:
            origin += f" ({event.measured_at[:16].replace('T', ' ')})"
        here = dataclasses.replace(point_of(point, origin, cached), measured=origin_text(event))
        self.points.setdefault(settings, {})[point.batch_size] = here
        if event is not None and event.device:
            self.device = event.device
        if settings != self.settings():
            return  # a point of settings the reader has left: kept, not drawn
        self.curve.add_point(point.batch_size, point.tokens_per_s, point.tpot_ms,
                             origin=origin, cached=cached, n=here.n, interval=here.interval())
        self.runner.status.announce(
            f"batch {point.batch_size} {'from the cache' if cached else 'measured'}: "
            f"{point.tokens_per_s:,.0f} tokens/s, {point.tpot_ms:.2f} ms per token")
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(point, event))}; each point prefills "
            f"{point.prompt_len} prompt tokens per request, then decodes "
            f"{point.new_tokens - 1} steps: the first {warmup_steps(point)} are a warm-up "
            f"and not counted, the other {point.decode_steps_timed} are timed (their median "
            f"is the time per token). Whiskers are 95% confidence intervals of that median "
            f"(a bootstrap over the timed steps); the table gives the steps' own spread (p10 "
            f"to p90) and whether other work disturbed the point. Big dots were measured "
            f"live, small ones came from the cache."
            f"{' The ' + point.preset + ' preset has ' + RANDOM_WEIGHTS + '.' if point.weights == 'random' else ''}"
            "</p>")
        self._moved()
        outcome = growth_outcome(self.measured)
        if outcome is not None:
            self.prediction_box.reveal(*outcome)
        question = doubling_question(self.measured)
        if question is not None:
            self.checkpoint.provide("doubling", question)

    def add_endpoint_result(self, point: EndpointConcurrencyResult,
                            settings: tuple | None = None) -> None:
        """N clients' point from the endpoint, labelled with its model and host."""
        settings = settings or self.settings()
        label = endpoint_label(point.base_url, point.model)
        failed = f"; {point.failed} of them failed ({point.first_error})" if point.failed else ""
        self.measured_on.object = site_html(
            f"<p>Measured over HTTP: <strong>{html.escape(label)}</strong>, timed at this "
            f"app's server (the client, so the network is included). Each point sends N "
            f"streamed requests of {point.prompt_len} prompt tokens at once, each asking for "
            f"{point.new_tokens} tokens{html.escape(failed)}; the time per token is their "
            "median, the total is every token over the time until the last answer ended.</p>")
        if point.tokens_per_s is None or point.tpot_ms is None:
            return  # nothing finished: no point to draw (the label says why)
        origin = "measured live over HTTP"
        self.points.setdefault(settings, {})[point.concurrency] = Point(
            point.tokens_per_s, point.tpot_ms, origin)
        if settings == self.settings():
            self.curve.add_point(point.concurrency, point.tokens_per_s, point.tpot_ms,
                                 origin=origin, cached=False)
            self.runner.status.announce(
                f"{point.concurrency} clients measured: {point.tokens_per_s:,.0f} tokens/s, "
                f"{point.tpot_ms:.2f} ms per token")
            self._moved()

    # ---- showing ----------------------------------------------------------------------------
    def _moved(self, *_events) -> None:
        b = int(self.batch_size)
        self.curve.set_here(b)
        here = self.measured.get(b)
        if here is None:
            self.readouts.clear()
        else:
            self.readouts.set(tput=f"{here.tokens_per_s:,.0f}",
                              tpot=f"{here.tpot_ms:.2f} ms",
                              users=f"{1000 / here.tpot_ms:,.0f}")
            ci = lambda what, unit: (  # noqa: E731
                f"; 95% CI {here.ci_text(what)} {unit} from {here.n} decode steps"
                if here.interval() else "")
            self.readouts.notes = {
                "tput": f"total tokens/s at {self.knob_word} {b}, all users{ci('tokens', 'tokens/s')}",
                "tpot": (f"median time per token of {b} clients" if self.measures_endpoint
                         else f"median decode step at batch {b}{ci('ms', 'ms')}")}
        words = doubling(self.measured, b, self.knob_word)
        extra = against_one(self.measured, b, self.knob_word)
        self.gain.object = site_html(f"<p><strong>{html.escape(words)}</strong> "
                                     f"{html.escape(extra)}</p>")
        self.table.object = site_html(self._table())
        self.pareto.set_points([pareto_point(b, p, self.knob_word)
                                for b, p in self.measured.items()])

    def _show_knob(self) -> None:
        """The slider's words follow the source: a batch size, or concurrent clients (the
        endpoint's model is the teacher's, so the preset choice goes)."""
        endpoint = self.measures_endpoint
        self.slider.name = "Concurrent clients (streaming at once)" if endpoint else \
            self.param.batch_size.label
        self.preset_choice.visible = not endpoint
        self.curve.set_x_label(
            "concurrent clients (each streaming one answer)" if endpoint else None,
            "client count" if endpoint else "batch size", "concurrency" if endpoint else "batch")

    def _reset(self, *_events) -> None:
        """New preset, settings or source: a different curve."""
        if getattr(self, "slider", None) is not None:
            self._show_knob()
        self.runner.cancel(keep=lambda job: job.state == "running")
        self.curve.clear()
        for batch in sorted(self.measured):
            p = self.measured[batch]
            self.curve.add_point(batch, p.tokens_per_s, p.tpot_ms, p.origin, p.cached, p.n,
                                 p.interval())
        self.measure()
        self._moved()

    def download_rows(self) -> list[dict]:
        """The curve's points as drawn (n: decode steps timed; lo/hi: 95% interval), batch order."""
        data = self.curve.points.data
        rows = [{k: data[k][i] for k in DOWNLOAD_COLUMNS} for i in range(len(data["batch"]))]
        return sorted(rows, key=lambda r: r["batch"])

    def download_header(self) -> dict:
        if self.measures_endpoint:
            return data_header(
                self, "endpoint_concurrency",
                {"url": self.endpoint.url, "model": self.endpoint.model,
                 "prompt_len": int(self.prompt_len), "new_tokens": int(self.new_tokens)},
                device=f"{self.endpoint.label}, timed over HTTP at this app's server",
                preset=self.endpoint.model, measured="live over HTTP, not cached",
                check="none: the endpoint's other load cannot be seen from the client",
                columns="batch: concurrent clients, each streaming one answer; tokens_per_s: "
                        "every token over the time until the last answer ended; "
                        "ms_per_token: the clients' median time per token")
        points = [self.measured[r["batch"]] for r in self.download_rows()
                  if r["batch"] in self.measured]
        measured = "; ".join(f"batch {b}: {p.measured or p.origin}"
                             for b, p in sorted(self.measured.items()))
        checks = {p.check for p in points if p.check}
        return data_header(
            self, "sweep_point", {k: v for k, v in self.job_params().items() if k != "batch_size"},
            device=self.device, preset=self.preset, measured=measured or "nothing yet",
            check="; ".join(sorted(checks)) or "nothing measured yet",
            columns="batch: sequences decoding together; tokens_per_s: total, all users "
                    "(batch / median decode step); ms_per_token: median decode step; *_lo, "
                    "*_hi: its 95% bootstrap interval; n: decode steps timed (warm-up excluded)")

    def _table(self) -> str:
        rows = [(b, f"{p.tokens_per_s:,.0f}", p.ci_text("tokens") or "-", f"{p.tpot_ms:.2f}",
                 p.ci_text("ms") or "-", p.spread, f"{1000 / p.tpot_ms:,.0f}", p.n or "-",
                 p.verdict, p.origin)
                for b, p in sorted(self.measured.items())]
        if not rows:
            return ""
        first = "concurrent clients" if self.measures_endpoint else "batch size"
        caption = (f"Points measured so far over HTTP, {self.endpoint.label}"
                   if self.measures_endpoint else None)
        return table_html((first, "total tokens/s (all users)", "95% CI (tokens/s)",
                           "ms per token (each user)", "95% CI (ms)",
                           "decode steps p10\u2013p90 (ms)", "tokens/s each user",
                           "decode steps timed", "disturbance check", "source"), rows,
                          caption=caption or f"Points measured so far, {self.preset} preset"
                                  f"{' (' + RANDOM_WEIGHTS + ')' if self.preset != 'tiny' else ''}"
                                  f"{' on ' + self.device if self.device else ''}")

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        points = {}
        for kind, params in cls.warm_jobs():
            cached = lookup(kind, params)
            if cached is not None:
                r = cached.result
                points[params["batch_size"]] = Point(r.tokens_per_s, r.tpot_ms, "cached", True)
        if not points:
            return []
        lines = [f"batch {b}: {p.tokens_per_s:,.0f} tokens/s in all, {p.tpot_ms:.2f} ms per "
                 "token each" for b, p in sorted(points.items())]
        question = doubling_question(points)
        if question is not None:
            lines.append(f"The first doubling under +20%: {question.answer.text}.")
        return lines

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        page = cls()
        return [("sweep_point", page.job_params(b)) for b in LADDER]
