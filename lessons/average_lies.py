"""Lesson 2: The average lies (tail latency). /app?lesson=average-lies

A real load test on the engine (the `load_test` job, engine/lab/jobs/serving.py): Poisson
arrivals of a mix of short and long requests, served in real time under continuous batching,
about 20 s on a 2-core CPU with the defaults. Histograms of E2E and TTFT with P50, mean, P90,
P95 and P99 marked; the percentile table; the slowest requests with why they were slow, read
from the trace (lessons.trace_reading).

URL: rate, requests, long_share, max_batch (/app?lesson=average-lies&rate=8).
"""

from __future__ import annotations

import html

import panel as pn
import param

from engine.lab.results import LoadTestResult, Percentiles
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane, site_html
from widgets.job_status import provenance
from widgets.latency_histogram import LatencyHistogram
from widgets.readouts import table_html

from .base import LessonPage
from .data_record import Run, result_header
from .trace_reading import STAT_COLUMNS, fmt_ms, percentile_rows, request_latencies, slowest

INTRO = """
<p>"The average response takes 300 ms" sounds like a promise. It is not one. Response times of a
busy server are lopsided: most requests are quick, a few are very slow, and those few drag the
average up while hiding behind it. The people who got the slow answers remember them.</p>
<p>Below, the engine serves a real load test: requests arrive at random moments (a Poisson
process at the rate you choose), most of them short, some long, all sharing one server. Every
request's timeline is recorded; the charts show how the latencies spread out.</p>
"""

PROSE = """
<h2>Reading the shape</h2>
<p>Both histograms lean to the left with a long tail to the right. The median (P50) is the
latency half the requests beat; the mean is pulled to the right of it by the slow tail. P90,
P95 and P99 are the latencies that 90, 95 and 99 percent of requests beat: they describe the
answers people complain about. Here percentiles interpolate linearly between the nearest
ranks, as numpy and vLLM's benchmark do.</p>

<h2>Why engineers quote P99</h2>
<p>If a page makes ten requests, the chance that at least one of them lands in the slowest 1%
is almost 10%. Tail latency is what a user meets on a normal day, so targets (SLOs) are written
on P95 or P99, never on the mean. A benchmark on an empty server has no tail at all: only
realistic concurrency, with requests arriving while others run, shows it. Raise the rate and
run again: P99 grows much faster than P50.</p>
"""

QUOTED = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Rules of thumb common in the field for an
interactive chat at moderate load: P50 TTFT under 300 ms, P99 TTFT under 1.2 s, P50 ITL under
40 ms, P99 ITL under 120 ms, P99 E2E under 8 s for a 512-token answer; a voice agent often needs
P99 TTFT under 500 ms, network included. And a throughput benchmark of 5,000 tokens/s can hide a
P99 TTFT of 8 s.</p>
<p class="source">Source: reference points collected in this course's content brief (common
knowledge of the field, not a measurement of this app).</p>
</blockquote>
"""

TARGETS = (("TTFT P50", lambda m: m.ttft_ms.p50, 300.0),  # (label, figure of the run, target)
           ("TTFT P99", lambda m: m.ttft_ms.p99, 1200.0),
           ("ITL P50", lambda m: m.itl_ms.p50, 40.0), ("ITL P99", lambda m: m.itl_ms.p99, 120.0))


def tail_sentence(e2e: Percentiles) -> str:
    """The lesson in one sentence, from a run's E2E summary."""
    p50, mean, p99 = e2e.p50, e2e.mean, e2e.p99
    if not p50 or mean is None or p99 is None:
        return "Not enough finished requests to describe the spread."
    return (f"The median request took {fmt_ms(p50)} ms end to end; the mean is "
            f"{fmt_ms(mean)} ms ({100 * (mean / p50 - 1):+.0f}% against the median), and the "
            f"slowest 1% took {fmt_ms(p99)} ms or more: {p99 / p50:.1f} times the median.")


class AverageLiesLesson(LessonPage):
    """Lesson 2: a load test's latency spread, percentiles, and its slowest requests."""

    slug = "average-lies"

    rate = param.Number(default=4.0, bounds=(0.5, 30.0), step=0.5,
                        label="Arrival rate (requests per second)")
    requests = param.Integer(default=80, bounds=(10, 400), label="Requests in the test")
    long_share = param.Number(default=0.2, bounds=(0.0, 0.6), step=0.05,
                              label="Share of long requests")
    max_batch = param.Integer(default=8, bounds=(1, 32), label="Batch slots (max batch)")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: LoadTestResult | None = None
        self.shown: Run | None = None  # the load test the histograms draw, for the download
        self.latencies: list = []  # each finished request's figures, as the histograms got them
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

    def body(self) -> list:
        controls = [pn.widgets.FloatSlider.from_param(self.param.rate),
                    pn.widgets.IntSlider.from_param(self.param.requests, step=10),
                    pn.widgets.FloatSlider.from_param(self.param.long_share),
                    pn.widgets.IntSlider.from_param(self.param.max_batch)]
        for w in controls:
            w.sizing_mode = "stretch_width"
        return [
            html_pane(INTRO),
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
            html_pane(QUOTED), self.targets,
        ]

    def job_params(self) -> dict:
        return {"rate": float(self.rate), "requests": int(self.requests),
                "long_share": round(float(self.long_share), 3),
                "max_batch": int(self.max_batch)}

    def start(self) -> None:
        self.run()

    def run(self) -> None:
        """Start a load test with the current settings. The button stays usable: pressed
        during a run, it replaces that run (the runner cancels it) with one at the new
        settings, so a reader never waits for a test they no longer want."""
        self.tail_text.object = site_html(
            f"<p>Serving {self.requests} requests arriving at {self.rate:g} per second "
            f"(about {self.requests / self.rate:.0f} s of arrivals)...</p>")
        self.shown = Run("load_test", self.job_params())
        self.runner.submit("load_test", self.job_params(), self._on_event)

    def _on_event(self, event) -> None:
        if event.type == "result":
            self.show_result(event.result, event)
        elif event.type == "error":
            self.tail_text.object = site_html("<p>No load test to show: see the message.</p>")

    def show_result(self, run: LoadTestResult, event=None) -> None:
        self.result = run
        self.shown = (self.shown or Run("load_test", self.job_params())).done(run, event)
        m = run.metrics
        rows = self.latencies = request_latencies(run)
        self.e2e.update([r.e2e_ms for r in rows], m.e2e_ms.to_dict())
        self.ttft.update([r.ttft_ms for r in rows], m.ttft_ms.to_dict())
        self.tail_text.object = site_html(f"<p><strong>{html.escape(tail_sentence(m.e2e_ms))}"
                                          "</strong></p>")
        self.say(tail_sentence(m.e2e_ms))
        self.table.object = site_html(table_html(
            ("latency (ms)", *STAT_COLUMNS), percentile_rows(m),
            caption=f"Percentiles over {m.completed} requests (ms)"))
        slow = slowest(run, 5)
        self.slow.object = site_html(table_html(
            ("request", "size", "E2E (ms)", "TTFT (ms)", "queue (ms)", "prompt / answer tokens",
             "why it was slow"),
            [(f"#{r.id}", r.size, fmt_ms(r.e2e_ms), fmt_ms(r.ttft_ms), fmt_ms(r.queue_ms),
              f"{r.prompt_len} / {r.output_len}", "; ".join(r.why)) for r in slow],
            numeric_from=2, caption="The five slowest requests by E2E"))
        self.targets.object = site_html(table_html(
            ("figure", "measured here (ms)", "quoted chat target (ms)", "met?"),
            [(label, fmt_ms(figure(m)), f"{target:,.0f}",
              "\u2013" if figure(m) is None else ("yes" if figure(m) <= target else "no"))
             for label, figure, target in TARGETS],
            caption="This run against the quoted chat targets (a tiny model on this machine, "
                    "not a production chat server)"))
        self.measured_on.object = site_html(
            f"<p>Measured: {html.escape(provenance(run, event))}. {m.completed} requests in "
            f"{m.duration_s:.1f} s; the server produced {m.throughput_tok_s:,.0f} output "
            f"tokens/s in total (all users), with {100 * (m.slot_use or 0):.0f}% of the "
            f"{run.config.max_batch} batch slots in use while it worked.</p>")

    def download_rows(self) -> list[dict]:
        """Each finished request's latencies, the values both histograms are drawn from."""
        return [{"request": r.id, "size": r.size, "prompt_tokens": r.prompt_len,
                 "output_tokens": r.output_len, "arrival_ms": r.arrival_ms,
                 "queue_ms": r.queue_ms, "ttft_ms": r.ttft_ms, "e2e_ms": r.e2e_ms}
                for r in self.latencies]

    def download_header(self) -> dict:
        shown = self.shown or Run("load_test", self.job_params())
        return result_header(
            self, shown.kind, shown.params, shown.result, shown.event, "load test",
            markers_ms={"E2E": self.e2e.values, "TTFT": self.ttft.values},
            columns="request: its id; size: short or long; prompt_tokens, output_tokens; "
                    "arrival_ms: when it arrived (ms since the test started); queue_ms: waiting "
                    "for a batch slot; ttft_ms: arrival to first token; e2e_ms: arrival to last "
                    "token. markers_ms: the lines on the histograms (the run's own percentiles)")

    def questions(self) -> list:
        return [
            Question("Most requests take about 200 ms and a few take 3 s. Where does the mean "
                     "sit?",
                     (Choice("Above the median, pulled up by the slow few", True,
                             "A handful of large values move the mean a lot and the median "
                             "hardly at all: the mean ends up describing nobody's request."),
                      Choice("Exactly on the median", False,
                             "Only for a symmetric spread. Latency is lopsided, with a long tail "
                             "to the right."),
                      Choice("Below the median", False,
                             "Slow outliers push the mean up, not down."))),
            Question("Why are latency targets written on P99 rather than on the mean?",
                     (Choice("Because users meet the tail, and the mean hides it", True,
                             "One request in a hundred sounds rare, but a busy user or a page "
                             "making many calls meets it often, and remembers it."),
                      Choice("Because P99 is easier to compute", False,
                             "It needs every value sorted; the mean needs only a sum. The reason "
                             "is what it describes, not its cost."),
                      Choice("Because the mean is always larger", False,
                             "The mean is usually below P99; it is just blind to how bad the "
                             "slow requests are."))),
            Question("A benchmark sends one request at a time and reports a P99 of 250 ms. What "
                     "does it tell you about a busy day?",
                     (Choice("Little: with no concurrency there is no queue and no tail", True,
                             "Requests that never wait for each other show only the model's own "
                             "speed. Queueing and shared steps, the causes of the tail, only "
                             "appear under realistic load."),
                      Choice("That P99 will stay at 250 ms", False,
                             "Run this page's load test at a higher rate: P99 climbs much faster "
                             "than P50."),
                      Choice("That the mean will be 250 ms", False,
                             "A percentile from an empty server predicts neither the mean nor "
                             "the tail under load."))),
            Question("The arrival rate doubles. What usually happens?",
                     (Choice("P99 grows much more than P50", True,
                             "The median request still finds a slot quickly; the unlucky ones "
                             "now queue behind more work, so the tail stretches first."),
                      Choice("P50 and P99 grow by the same factor", False,
                             "Queueing hits the unlucky requests hardest, so the spread widens."),
                      Choice("Nothing changes until the server is full", False,
                             "Requests start sharing steps and waiting for slots long before "
                             "the server is saturated."))),
        ]

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return [("load_test", cls().job_params())]
