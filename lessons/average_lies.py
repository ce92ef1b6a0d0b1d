"""Lesson 2: The average lies (tail latency). /app?lesson=average-lies

A real load test on the engine (the `load_test` job, engine/lab/jobs/serving.py): Poisson
arrivals of a mix of short and long requests, served in real time under continuous batching,
about 10 s of arrivals with the defaults (40 requests at 4 a second; see `requests`).
Histograms of E2E and TTFT with P50, mean, P90, P95 and P99 marked; the percentile table; the
slowest requests with why they were slow, read
from the trace (lessons.trace_reading).

URL: load (open or closed), rate, users, requests, long_share, max_batch
(/app?lesson=average-lies&rate=8, /app?lesson=average-lies&load=closed&users=16), source.

With an OpenAI-compatible server configured by the teacher (engine.lab.endpoint), a source
choice sends the same mix over HTTP to it instead (the `endpoint_load_test` job, timed at the
client): every figure is then labelled with the server's model and host.
"""

from __future__ import annotations

import dataclasses
import html

import panel as pn
import param

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from engine.calc.stats import min_samples
from engine.lab.results import EndpointLoadTestResult, LoadTestResult, Percentiles
from widgets.checkpoint import Question, numeric_question
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import provenance
from widgets.latency_histogram import LatencyHistogram
from widgets.readouts import table_html
from widgets.tables import UNBOUNDED, sig

from .base import LessonPage
from .data_record import Run, result_header
from .endpoint_source import EndpointSource, endpoint_label
from .load_model import CLOSED, LOADS, OPEN
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached, which_is_larger
from .trace_reading import (
    STAT_COLUMNS,
    Latency,
    fmt_ms,
    percentile_rows,
    request_latencies,
    slowest,
)
from .words.average_lies import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    PROSE,
    QUESTIONS,
    QUOTED,
    TAKEAWAY,
)

# The quoted examples (QUOTED, in the words), as limits to hold this run's figures against:
# (label, figure of the run, limit in ms, what the example is)
EXAMPLES = (("TTFT P50", lambda m: m.ttft_ms.p50, 200.0, "a chatbot's first response"),
            ("TTFT P99", lambda m: m.ttft_ms.p99, 200.0, "a chatbot's first response"),
            ("TPOT P50", lambda m: m.tpot_ms.p50, 100.0, "faster than a typical reader"),
            ("TPOT P99", lambda m: m.tpot_ms.p99, 100.0, "faster than a typical reader"))



def skew_outcome(e2e: Percentiles) -> tuple[str, str] | None:
    """Which prediction choice the run's E2E supports, and the numbers behind it."""
    p50, mean = e2e.p50, e2e.mean
    if not p50 or mean is None:
        return None
    pct = 100 * (mean / p50 - 1)
    above, same, below = PREDICTION.choices
    choice = which_is_larger(mean, p50, 0.02, (above, below, same))
    return choice, f"mean {fmt_ms(mean)} ms against a median of {fmt_ms(p50)} ms, {pct:+.0f}%"


def skew_question(e2e: Percentiles) -> Question | None:
    """Where the reader's own mean sat against their median; the key is their run's."""
    outcome = skew_outcome(e2e)
    if outcome is None:
        return None
    p50, mean = e2e.p50, e2e.mean
    pct = 100 * (mean / p50 - 1)
    size = f"{abs(pct):.0f}%"
    texts = {"Above the median": f"Above the median, by about {size}",
             "Below the median": f"Below the median, by about {size}",
             "About on it (within 2%)": "On the median, within 2%"}
    why = (f"Your run: mean {fmt_ms(mean)} ms, median {fmt_ms(p50)} ms, so the mean sat "
           f"{pct:+.0f}% from the median.")
    right = texts[outcome[0]]
    wrong = [(t, why) for c, t in texts.items() if c != outcome[0]]
    return numeric_question("In your load test, where did the mean E2E sit against the median?",
                            (right, why + " The slow tail pulls the mean; the median ignores "
                                          "how slow the slow ones were."), wrong)


def tail_sentence(e2e: Percentiles) -> str:
    """The lesson in one sentence, from a run's E2E summary."""
    p50, mean, p99 = e2e.p50, e2e.mean, e2e.p99
    if not p50 or mean is None or p99 is None:
        return "Not enough finished requests to describe the spread."
    head = (f"The median request took {fmt_ms(p50)} ms end to end; the mean is "
            f"{fmt_ms(mean)} ms ({100 * (mean / p50 - 1):+.0f}% against the median), and the ")
    if e2e.count < min_samples(99) and e2e.p95 is not None:
        # too few requests to bound a P99 (min_samples): say what the P95 bounds instead
        return head + (f"slowest 5% took {fmt_ms(e2e.p95)} ms or more: "
                       f"{e2e.p95 / p50:.1f} times the median.")
    return head + (f"slowest 1% took {fmt_ms(p99)} ms or more: {p99 / p50:.1f} times the "
                   f"median.")


def client_slowest(run: EndpointLoadTestResult, count: int = 5) -> list[Latency]:
    """The slowest requests of a run timed at the client: their causes are inside a server
    whose steps we cannot see, so the table says so instead of guessing."""
    rows = sorted(request_latencies(run), key=lambda r: -r.e2e_ms)[:count]
    why = ("not visible from the client: the server's steps are its own",)
    return [dataclasses.replace(r, why=why) for r in rows]


def load_words(run: LoadTestResult) -> str:
    """How the test loaded the engine, as the field names it."""
    w = run.workload
    if w.users:
        return f"Closed loop of {w.users} concurrent users"
    return f"Open loop, Poisson arrivals at {w.rate:g} requests/s"


def endpoint_provenance(run: EndpointLoadTestResult) -> str:
    """What measured these numbers: the endpoint's model and host, timed by this app's server."""
    m = run.metrics
    failed = ""
    if run.failed:
        failed = (f" {run.failed} request(s) failed and are left out"
                  f"{': ' + html.escape(run.first_error) if run.first_error else ''}.")
    return (f"<p>Measured over HTTP: <strong>"
            f"{html.escape(endpoint_label(run.base_url, run.model))}</strong>, timed at this app's server (the client, so the "
            f"network is included). {m.completed} requests in {m.duration_s or 0:.1f} s; the "
            f"server produced {m.throughput_tok_s or 0:,.0f} output tokens/s in total (all "
            f"users).{failed}</p>")


GPU_MODEL = LLAMA_3_8B
GPU_BATCH, GPU_PROMPT, GPU_LONG_PROMPT = 8, 500, 8000  # tokens
GPU_SHORT, GPU_LONG = 100, 1000  # answer tokens


def answer_floor_ms(m: Machine, prompt: int, answer: int) -> float:
    """An answer's least time on a machine: its prefill, then a decode step per later token
    at batch GPU_BATCH (the context taken at the prompt's length)."""
    step = step_floor_ms(decode_step(GPU_MODEL, GPU_BATCH, prompt), m)
    return prefill_floor_ms(GPU_MODEL, m, prompt) + (answer - 1) * step


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 2's finding on each machine: a short and a long answer's floor, their ratio,
    and the long prompt's prefill a newcomer can arrive behind."""
    def ratio(m: Machine) -> str:
        short = answer_floor_ms(m, GPU_PROMPT, GPU_SHORT)
        return f"{answer_floor_ms(m, GPU_PROMPT, GPU_LONG) / short:.1f}x"

    table = machine_table(machines, (
        (f"{GPU_SHORT}-token answer (ms)",
         lambda m: sig(answer_floor_ms(m, GPU_PROMPT, GPU_SHORT))),
        (f"{GPU_LONG:,}-token answer (ms)",
         lambda m: sig(answer_floor_ms(m, GPU_PROMPT, GPU_LONG))),
        ("long / short", ratio),
        (f"waiting behind a {GPU_LONG_PROMPT:,}-token prefill (ms)",
         lambda m: sig(prefill_floor_ms(GPU_MODEL, m, GPU_LONG_PROMPT))),
    ), f"{GPU_MODEL.name} in bf16, {GPU_PROMPT}-token prompts, batch {GPU_BATCH}: floors")
    return GPU_TEXT + table


class AverageLiesLesson(EndpointSource, LessonPage):
    """Lesson 2: a load test's latency spread, percentiles, and its slowest requests."""

    slug = "average-lies"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS
    shows_nearby = True  # a cached load test of nearby settings, shown while this one waits

    load = param.Selector(default=OPEN, objects=LOADS, label="Load")
    rate = param.Number(default=4.0, bounds=(0.5, 30.0), step=0.5,
                        label="Arrival rate (requests per second, open loop)")
    users = param.Integer(default=8, bounds=(1, 64),
                          label="Concurrent users (closed loop)")
    # 40 by default: a class's load tests share one engine, so each is kept short. P95 is
    # bounded from 20 requests, P99 needs 100 (min_samples: the table marks it) and the words
    # read P95 at this size; a reader raises it for a P99 of its own
    requests = param.Integer(default=40, bounds=(10, 400), label="Requests in the test")
    long_share = param.Number(default=0.2, bounds=(0.0, 0.6), step=0.05,
                              label="Share of long requests")
    max_batch = param.Integer(default=8, bounds=(1, 32), label="Batch slots (max batch)")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: LoadTestResult | EndpointLoadTestResult | None = None
        self.shown: Run | None = None  # the load test the histograms draw, for the download
        self.latencies: list = []  # each finished request's figures, as the histograms got them
        self.gpu_box = GpuBox(gpu_finding)
        self.e2e = LatencyHistogram(title="End-to-end latency (E2E)",
                                    x_label="E2E: arrival to last token (ms)")
        self.ttft = LatencyHistogram(title="Time to first token (TTFT)",
                                     x_label="TTFT: arrival to first token (ms)")
        self.button = pn.widgets.Button(label="Run the load test", color="primary",
                                        width=200)
        self.button.on_click(lambda _e: self.run())
        self.tail_text = html_pane("<p><em>The load test starts when the page has loaded.</em></p>",
                                 css_classes=["tail-summary"])
        self.table = html_pane("", css_classes=["percentile-table"])
        self.slow = html_pane("", css_classes=["slowest-table"])
        self.targets = html_pane("", css_classes=["targets-table"])
        self.measured_on = html_pane("", css_classes=["measurement-label"])
        self.download = DataDownload("load-test-latencies", self.download_rows,
                                     self.download_header, "Each request's latencies")

    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.run()

    def body(self) -> list:
        self._batch_slider = pn.widgets.IntSlider.from_param(
            self.param.max_batch, visible=self.source == "engine")
        self._load_widgets = {
            "load": pn.widgets.RadioButtonGroup.from_param(self.param.load),
            OPEN: pn.widgets.FloatSlider.from_param(self.param.rate),
            CLOSED: pn.widgets.IntSlider.from_param(self.param.users)}
        self._show_load()
        controls = [*self._load_widgets.values(),
                    pn.widgets.IntSlider.from_param(self.param.requests, step=10),
                    pn.widgets.FloatSlider.from_param(self.param.long_share),
                    self._batch_slider]
        controls = [*self.source_widgets(), *controls]
        for w in controls:
            w.sizing_mode = "stretch_width"
        return [
            html_pane(INTRO), self.prediction_box,
            html_pane("<h2>The load test</h2>"),
            pn.Row(pn.Column(*controls, self.button, width=330),
                   pn.Column(self.tail_text, self.runner.status, self.measured_on,
                             sizing_mode="stretch_width"), sizing_mode="stretch_width"),
            pn.Row(self.e2e, self.ttft, sizing_mode="stretch_width"), self.download,
            self.table,
            html_pane("<h2>The slowest requests, and why</h2><p>Read from the run's trace: "
                      "when each request arrived, waited, was admitted, and which engine steps "
                      "its tokens came from.</p>"),
            self.slow,
            html_pane(PROSE),
            html_pane("<h2>Targets are written on the tail</h2>"),
            html_pane(QUOTED), self.targets, self.gpu_box,
        ]

    @property
    def closed(self) -> bool:
        """A closed-loop test: the built-in engine only (the endpoint's mix is sent open-loop)."""
        return self.load == CLOSED and not self.measures_endpoint

    def job_params(self) -> dict:
        params = {"rate": float(self.rate), "requests": int(self.requests),
                  "long_share": round(float(self.long_share), 3),
                  "max_batch": int(self.max_batch)}
        if self.closed:  # the rate is not used: kept as 4/s, so one cache entry per user count
            params.update(rate=4.0, users=int(self.users))
        return params

    @param.depends("source", "load", watch=True)
    def _source_changed(self) -> None:
        """The batch slots are our engine's setting; an endpoint's batch size is its own, and
        the endpoint is sent the mix open-loop."""
        if getattr(self, "_batch_slider", None) is not None:
            self._batch_slider.visible = self.source == "engine"
        self._show_load()

    def _show_load(self) -> None:
        """The rate slider for open loop, the users slider for closed loop."""
        widgets = getattr(self, "_load_widgets", None)
        if widgets is None:
            return
        widgets["load"].visible = not self.measures_endpoint
        widgets[OPEN].visible = not self.closed
        widgets[CLOSED].visible = self.closed

    def job(self) -> tuple[str, dict]:
        """The job to run: the built-in engine's load test, or the same mix sent to the
        teacher's endpoint (whose batch size is the server's own, not ours to set)."""
        if self.measures_endpoint:
            params = {k: v for k, v in self.job_params().items() if k != "max_batch"}
            return "endpoint_load_test", {**params, "url": self.endpoint.url,
                                          "model": self.endpoint.model}
        return "load_test", self.job_params()

    def run(self) -> None:
        """Start a load test with the current settings. The button stays usable: pressed
        during a run, it replaces that run (the runner cancels it) with one at the new
        settings, so a reader never waits for a test they no longer want."""
        kind, params = self.job()
        self.shown = Run(kind, params)
        self.runner.submit(kind, params, self._on_event)
        self.tail_text.object = site_html(
            "<p>The load test starts once you have made your prediction above (or skipped "
            "it).</p>" if self.runner.held else self._serving_text())

    def _serving_text(self) -> str:
        if self.closed:
            return (f"<p>Serving {self.requests} requests from {self.users} users, closed loop: "
                    "each sends again as soon as their answer ends...</p>")
        return (f"<p>Serving {self.requests} requests arriving at {self.rate:g} per second, "
                f"open loop (about {self.requests / self.rate:.0f} s of arrivals)...</p>")

    def _on_event(self, event) -> None:
        if event.type == "started":
            self.tail_text.object = site_html(self._serving_text())
        elif event.type == "result":
            self.show_result(event.result, event)
        elif event.type == "nearby" and self.result is None:  # the status says whose it is
            self.show_result(event.result, event)
        elif event.type == "error":
            self.tail_text.object = site_html("<p>No load test to show: see the message.</p>")

    def show_result(self, run: LoadTestResult | EndpointLoadTestResult, event=None) -> None:
        self.result = run
        self.shown = (self.shown or Run(*self.job())).done(run, event)
        m = run.metrics
        outcome = skew_outcome(m.e2e_ms)
        if outcome is not None:
            self.prediction_box.reveal(*outcome)
            self.checkpoint.provide("skew", skew_question(m.e2e_ms))
        rows = self.latencies = request_latencies(run)
        self.e2e.update([r.e2e_ms for r in rows], m.e2e_ms.to_dict())
        self.ttft.update([r.ttft_ms for r in rows], m.ttft_ms.to_dict())
        self.tail_text.object = site_html(f"<p><strong>{html.escape(tail_sentence(m.e2e_ms))}"
                                          "</strong></p>")
        self.say(tail_sentence(m.e2e_ms))
        self.table.object = site_html(table_html(
            ("latency (ms)", *STAT_COLUMNS), percentile_rows(m, run),
            caption=f"Percentiles over {m.completed} requests (ms), each with its 95% interval "
                    f"[low–high] (bootstrap over the requests); {UNBOUNDED} too few samples to "
                    f"bound that percentile (a P99 needs {min_samples(99)})"))
        slow = slowest(run, 5) if isinstance(run, LoadTestResult) else client_slowest(run, 5)
        self.slow.object = site_html(table_html(
            ("request", "size", "E2E (ms)", "TTFT (ms)", "queue (ms)", "prompt / answer tokens",
             "why it was slow"),
            [(f"#{r.id}", r.size, fmt_ms(r.e2e_ms), fmt_ms(r.ttft_ms), fmt_ms(r.queue_ms),
              f"{r.prompt_len} / {r.output_len}", "; ".join(r.why)) for r in slow],
            numeric_from=2, caption="The five slowest requests by E2E"))
        self.targets.object = site_html(table_html(
            ("figure", "measured here (ms)", "quoted example (ms)", "the example", "within it?"),
            [(label, fmt_ms(figure(m)), f"{limit:,.0f}", what,
              "\u2013" if figure(m) is None else ("yes" if figure(m) <= limit else "no"))
             for label, figure, limit, what in EXAMPLES],
            caption="This run against the quoted examples (" + (
                endpoint_label(run.base_url, run.model)
                if isinstance(run, EndpointLoadTestResult)
                else "a tiny model on this machine, not a production chat server") + ")"))
        if isinstance(run, EndpointLoadTestResult):
            self.measured_on.object = site_html(endpoint_provenance(run))
            return
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(run, event))}. {load_words(run)}: "
            f"{m.completed} requests in {m.duration_s:.1f} s; the server produced {m.throughput_tok_s:,.0f} output "
            f"tokens/s in total (all users), with {100 * (m.slot_use or 0):.0f}% of the "
            f"{run.config.max_batch} batch slots in use while it worked.</p>")

    def download_rows(self) -> list[dict]:
        """Each finished request's latencies, the values both histograms are drawn from."""
        return [{"request": r.id, "size": r.size, "prompt_tokens": r.prompt_len,
                 "output_tokens": r.output_len, "arrival_ms": r.arrival_ms,
                 "queue_ms": r.queue_ms, "ttft_ms": r.ttft_ms, "e2e_ms": r.e2e_ms}
                for r in self.latencies]

    def download_header(self) -> dict:
        shown = self.shown or Run(*self.job())
        return result_header(
            self, shown.kind, shown.params, shown.result, shown.event, "load test",
            markers_ms={"E2E": self.e2e.values, "TTFT": self.ttft.values},
            markers_interval={"E2E": {n: e.to_dict() for n, e in self.e2e.estimates.items()},
                              "TTFT": {n: e.to_dict() for n, e in self.ttft.estimates.items()}},
            columns="request: its id; size: short or long; prompt_tokens, output_tokens; "
                    "arrival_ms: when it arrived (ms since the test started); queue_ms: waiting "
                    "for a batch slot; ttft_ms: arrival to first token; e2e_ms: arrival to last "
                    "token. markers_ms: the lines on the histograms (the run's own percentiles); "
                    "markers_interval: the bands behind them, each line's 95% bootstrap "
                    "interval over the requests (ci_lo, ci_hi), n and whether n bounds it")

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {"load test": ("load_test", self.job_params())}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        params = self.job_params()
        m = cached.result.metrics
        return [f"Default load test ({params['requests']} requests at {params['rate']:g}/s): E2E "
                f"P50 {fmt_ms(m.e2e_ms.p50)} ms, mean {fmt_ms(m.e2e_ms.mean)} ms, P99 "
                f"{fmt_ms(m.e2e_ms.p99)} ms; TTFT P99 {fmt_ms(m.ttft_ms.p99)} ms; "
                f"{m.throughput_tok_s:,.0f} tokens/s in all; the test lasted {m.duration_s or 0:.0f} s "
                f"(measured {cached.measured_at})."]
