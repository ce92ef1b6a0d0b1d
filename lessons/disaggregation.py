"""Lesson 15: Prefill here, decode there (disaggregation). /app?lesson=disaggregation

One run of the engine's `disaggregation` job: a Poisson mix of short and long prompts served
colocated with whole-prompt prefill, colocated with chunked prefill, and disaggregated (a
prefill worker and a decode worker, the KV of each prompt handed over). Where the engine has
fewer than two cores of its own the disaggregated arm is computed from measured step costs (a
replay), and the table, the verdict and the status line say so. The table gives each arm's TTFT (median and P99), the ITL tail, the
handover and DistServe's goodput at the reader's TTFT and TPOT targets; the prediction is judged
on the ITL P99, disaggregated against chunked.

URL: requests, rate, slo_ttft_ms, slo_tpot_ms:
/app?lesson=disaggregation&requests=8&rate=2&slo_tpot_ms=100

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/disaggregation.py; this module is its view.
"""

from __future__ import annotations

import panel as pn
import param

from engine.calc.disaggregation import ARM_NAMES, ArmRow, best, fit_line, median
from engine.lab.results import DisaggregationResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox
from .teaching import Cached, which_is_larger
from .words.disaggregation import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    SETUP,
    TAKEAWAY,
)

KIND = "disaggregation"


def gpu_finding(machines) -> str:
    """Lesson 15's "On a GPU" box: the handover's size and its time over NVLink and a network
    port, from the figures the text names (no per-machine table: the link, not the GPU, sets
    it)."""
    return GPU_TEXT


def arm_row(arm) -> ArmRow:
    """One arm of the job's result in figures."""
    m = arm.metrics
    handovers = [r.handover_ms for r in arm.requests if r.handover_ms is not None]
    return ArmRow(arm.arm, arm.how, m.ttft_ms.p50, m.ttft_ms.p99, m.itl_ms.p99, m.goodput_rps,
                  m.requests_meeting_slo, m.completed, median(handovers))


def rows_of(result: DisaggregationResult) -> list[ArmRow]:
    return [arm_row(a) for a in result.arms]


def itl_outcome(rows: list[ArmRow]) -> tuple[str, str] | None:
    """Which prediction choice the ITL P99 supports: disaggregated against chunked."""
    by = {r.arm: r for r in rows}
    split, chunked = by.get("disaggregated"), by.get("chunked")
    if split is None or chunked is None or None in (split.itl_p99_ms, chunked.itl_p99_ms):
        return None
    choice = which_is_larger(chunked.itl_p99_ms, split.itl_p99_ms, 0.1, PREDICTION.choices[::2]
                             + (PREDICTION.choices[1],))
    how = "" if split.how == "measured live" else f" ({split.how})"
    return choice, (f"ITL P99 {sig(chunked.itl_p99_ms)} ms colocated with chunked prefill, "
                    f"{sig(split.itl_p99_ms)} ms disaggregated{how}")


def goodput_question(rows: list[ArmRow]) -> Question | None:
    """Which arm had the most goodput at the reader's targets (the key is their run)."""
    winner = best(rows, "goodput_rps", lower=False)
    if winner is None:
        return None
    figures = ", ".join(f"{ARM_NAMES[r.arm]} {sig(r.goodput_rps)} req/s" for r in rows)
    return Question("In your run, which way of serving had the most goodput at your targets?",
                    tuple(Choice(ARM_NAMES[r.arm], r.arm == winner, f"Your run: {figures}.")
                          for r in rows))


def table_html(rows: list[ArmRow], result: DisaggregationResult) -> str:
    body = []
    for r in rows:
        attain = "-" if r.attainment is None else f"{100 * r.attainment:.0f}%"
        body.append(
            f'<tr><th scope="row">{ARM_NAMES[r.arm]}</th><td>{r.how}</td>'
            f'<td class="num">{sig(r.ttft_p50_ms)}</td><td class="num">{sig(r.ttft_p99_ms)}</td>'
            f'<td class="num">{sig(r.itl_p99_ms)}</td>'
            f'<td class="num">{sig(r.handover_p50_ms)}</td>'
            f'<td class="num">{sig(r.goodput_rps)}</td><td class="num">{attain} of '
            f"{r.completed}</td></tr>")
    heads = ("how", "TTFT P50 (ms)", "TTFT P99 (ms)", "ITL P99 (ms)", "handover, median (ms)",
             "goodput (req/s)", "met both targets")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    m = result.arms[0].metrics
    w = result.workload
    return (f'<table class="plain disagg-table"><caption>{w.requests} requests, Poisson at '
            f"{sig(w.rate)}/s, {100 * w.long_share:.0f}% long ({w.long_prompt[0]}-"
            f"{w.long_prompt[1]}-token prompts), max batch {result.max_batch}; targets: TTFT "
            f"{sig(m.slo_ttft_ms)} ms, TPOT {sig(m.slo_tpot_ms)} ms</caption><thead><tr>"
            f'<th scope="col">serving</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table>")


def handover_line(result: DisaggregationResult) -> str | None:
    """The handover against prompt length, a least-squares line over the run's requests."""
    split = next((a for a in result.arms if a.arm == "disaggregated"), None)
    pairs = [(r.prompt_len, r.handover_ms) for r in (split.requests if split else ())
             if r.handover_ms is not None]
    fit = fit_line([p for p, _ in pairs], [h for _, h in pairs]) if pairs else None
    if fit is None:
        return None
    return (f"- **The handover:** {sig(fit.fixed)} ms + {sig(1000 * fit.per_unit)} us per "
            f"prompt token (a least-squares line over the {len(pairs)} requests; "
            f"{sig(result.kv_bytes_per_token)} bytes of KV per token)")


def verdict_text(rows: list[ArmRow], result: DisaggregationResult | None = None) -> str:
    lines = []
    for field, what, lower in (("itl_p99_ms", "the lowest ITL P99", True),
                               ("ttft_p99_ms", "the lowest TTFT P99", True),
                               ("goodput_rps", "the most goodput", False)):
        arm = best(rows, field, lower)
        if arm is not None:
            lines.append(f"- **{what}:** {ARM_NAMES[arm]}")
    line = handover_line(result) if result is not None else None
    if line:
        lines.append(line)
    split = next((r for r in rows if r.arm == "disaggregated"), None)
    if split is not None and split.how != "measured live":
        lines.append(f"- The disaggregated row is **{split.how}**, not a live measurement: the "
                     "engine has fewer than two cores of its own here.")
    return "\n".join(lines)


class DisaggregationLesson(LessonPage):
    """Lesson 15: one workload colocated and disaggregated."""

    slug = "disaggregation"
    job_noun = "runs"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    requests = param.Integer(default=16, bounds=(4, 32), label="Requests")
    rate = param.Number(default=2.0, bounds=(0.5, 8.0), step=0.5,
                        label="Arrival rate (requests per second)")
    slo_ttft_ms = param.Number(default=1000.0, bounds=(50.0, 10_000.0), step=50.0,
                               label="TTFT target (ms)")
    slo_tpot_ms = param.Number(default=100.0, bounds=(5.0, 1000.0), step=5.0,
                               label="TPOT target (ms)")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: DisaggregationResult | None = None
        self.shown: dict[str, Run] = {}
        self.download = DataDownload("disaggregation-runs", self.download_rows,
                                     self.download_header, "Every request of the three runs")
        self.table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["disagg-verdict"])
        self.gpu_box = GpuBox(gpu_finding)

    # ---- jobs ------------------------------------------------------------------------------
    def run_params(self) -> dict:
        return {"requests": self.requests, "rate": self.rate, "slo_ttft_ms": self.slo_ttft_ms,
                "slo_tpot_ms": self.slo_tpot_ms}

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {"three runs": (KIND, self.run_params())}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        return [f"{ARM_NAMES[r.arm]} ({r.how}): TTFT P99 {sig(r.ttft_p99_ms)} ms, ITL P99 "
                f"{sig(r.itl_p99_ms)} ms, goodput {sig(r.goodput_rps)} req/s"
                for r in rows_of(cached.result)]

    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.result = None
        self.table.object = self.verdict.object = ""
        self.shown = {"three runs": Run(KIND, self.run_params())}
        self.runner.run([(KIND, self.run_params(), self.on_event)])

    def on_event(self, event) -> None:
        if event.type != "result":
            return
        self.shown["three runs"].done(event.result, event)
        self.result = event.result
        rows = rows_of(event.result)
        self.table.object = table_html(rows, event.result)
        self.verdict.object = verdict_text(rows, event.result)
        outcome = itl_outcome(rows)
        if outcome is not None:
            self.prediction_box.reveal(*outcome)
        question = goodput_question(rows)
        if question is not None:
            self.checkpoint.provide("disaggregation", question)
        how = event.result.provenance
        origin = "from the cache" if event.cached else "measured"
        self.say(f"The three runs {origin}{f' ({how})' if how else ''}: "
                 + "; ".join(f"{ARM_NAMES[r.arm]} ITL P99 {sig(r.itl_p99_ms)} ms"
                             for r in rows) + ".")

    @param.depends("requests", "rate", "slo_ttft_ms", "slo_tpot_ms", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- data ------------------------------------------------------------------------------
    def download_rows(self) -> list[dict]:
        """Every request of every arm: its size, prompt, TTFT, largest gap and handover."""
        if self.result is None:
            return []
        return [{"serving": ARM_NAMES[a.arm], "how": a.how, "id": r.id, "size": r.size,
                 "prompt_len": r.prompt_len, "ttft_ms": r.ttft_ms, "itl_max_ms": r.itl_max_ms,
                 "handover_ms": r.handover_ms}
                for a in self.result.arms for r in a.requests]

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown or {"three runs": Run(KIND, self.run_params())},
            columns="serving: colocated (whole prompts or chunked prefill) or disaggregated; "
                    "how: measured live, or computed from measured step costs (replay); id, "
                    "size (short or long), prompt_len: the request; ttft_ms: arrival to first "
                    "token; itl_max_ms: its largest gap between tokens; handover_ms: first "
                    "token to the decode worker holding its KV (disaggregated only)")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.IntSlider.from_param(self.param.requests, throttled=True,
                                            sizing_mode="stretch_width"),
            *(pn.widgets.FloatSlider.from_param(p, throttled=True, sizing_mode="stretch_width")
              for p in (self.param.rate, self.param.slo_ttft_ms, self.param.slo_tpot_ms)),
            sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls,
                self.runner.status, self.verdict, self.table, self.download, html_pane(QUOTE),
                self.gpu_box]
