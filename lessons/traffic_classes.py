"""Lesson 16: Two kinds of traffic, one server. /app?lesson=traffic-classes

One real `traffic_classes` job: a mixed workload (chat requests arriving at random beside a batch
job of long summaries) served one FIFO queue, with an interactive lane over a batch lane, with
a tenant flooding the interactive lane, and with a token bucket per tenant. Per run and group
(batch, the chat users, the flooding tenant): TTFT P50 and P99 with counts and 95% intervals,
and the batch job's output tokens per second (engine.calc.traffic).

URL: chat_rate, chat_requests, batch_requests:
/app?lesson=traffic-classes&chat_rate=5&chat_requests=16&batch_requests=4 (the flooding tenant
sends as many requests as the chat users together)

The lesson's words are in lessons/words/traffic_classes.py; this module is its view.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import panel as pn
import param

from engine.calc.traffic import ClassRecord, ClassStats, class_stats, ratio
from engine.lab.results import TrafficClassesResult, TrafficRun
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import sig, with_interval

from .base import LessonPage
from .data_record import Run, runs_header
from .teaching import Cached, which_is_larger
from .words.traffic_classes import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    SETUP,
    TAKEAWAY,
)

KIND = "traffic_classes"
FLOOD = "flood"  # the flooding tenant (engine.traffic_mix.FLOOD_TENANT)
RUN_NAMES = {"fifo": "one queue", "lanes": "lanes", "flood": "lanes, flooded",
             "quota": "lanes, flooded, quota"}
GROUPS = {"interactive": "chat users", "batch": "batch job",
          f"interactive/{FLOOD}": "flooding tenant"}


@dataclass(frozen=True)
class Findings:
    """The three comparisons the page draws, each a ratio of two measured figures (None when
    one is missing): interactive P99 TTFT lanes / fifo, batch throughput lanes / fifo, chat
    users' P99 TTFT quota / flood."""

    chat_p99: tuple[float | None, float | None]  # fifo, lanes (ms)
    batch_tok_s: tuple[float | None, float | None]  # fifo, lanes
    flooded_p99: tuple[float | None, float | None]  # flood, quota: the chat users (ms)

    @property
    def gain(self) -> float | None:
        return ratio(*reversed(self.chat_p99))

    @property
    def batch_pays(self) -> float | None:
        return ratio(*reversed(self.batch_tok_s))

    @property
    def quota_protects(self) -> float | None:
        return ratio(*reversed(self.flooded_p99))


def run_stats(run: TrafficRun) -> dict[str, ClassStats]:
    """Each group's figures in one run, the flooding tenant apart."""
    records = (ClassRecord(r.traffic_class or "interactive", r.tenant, r.arrival_s,
                           r.first_token_s, r.finish_s, len(r.token_s), r.refused)
               for r in run.requests)
    return class_stats(records, split_tenant=FLOOD)


def findings(stats: dict[str, dict[str, ClassStats]]) -> Findings:
    def p99(run: str, group: str) -> float | None:
        s = stats.get(run, {}).get(group)
        return None if s is None else s.ttft_p99.value

    def tput(run: str) -> float | None:
        s = stats.get(run, {}).get("batch")
        return None if s is None else s.throughput_tok_s

    return Findings((p99("fifo", "interactive"), p99("lanes", "interactive")),
                    (tput("fifo"), tput("lanes")),
                    (p99("flood", "interactive"), p99("quota", "interactive")))


def prediction_outcome(f: Findings) -> tuple[str, str] | None:
    fifo, lanes = f.batch_tok_s
    if fifo is None or lanes is None:
        return None
    much_lower, same, higher = PREDICTION.choices
    choice = which_is_larger(fifo, lanes, 0.10, (much_lower, higher, same))
    return choice, (f"the batch job made {sig(fifo)} tokens/s in one queue and {sig(lanes)} "
                    f"tokens/s with lanes")


def gain_question(f: Findings) -> Question | None:
    """How much the chat users' P99 TTFT fell with lanes (the key is the reader's runs)."""
    fifo, lanes = f.chat_p99
    if fifo is None or lanes is None or fifo <= 0:
        return None
    options = ("It fell to under half", "It fell, but not to half", "It did not fall")
    answer = options[0] if lanes < 0.5 * fifo else options[1] if lanes < 0.95 * fifo \
        else options[2]
    why = (f"Your runs: the chat users' P99 TTFT was {sig(fifo)} ms in one queue and "
           f"{sig(lanes)} ms with lanes ({lanes / fifo:.2f}x).")
    return Question("In your runs, what happened to the chat users' P99 TTFT when the lanes "
                    "were added?", tuple(Choice(text, text == answer, why) for text in options))


def table_html(stats: dict[str, dict[str, ClassStats]]) -> str:
    body = []
    for run, name in RUN_NAMES.items():
        for group, label in GROUPS.items():
            s = stats.get(run, {}).get(group)
            if s is None:
                continue
            tput = sig(s.throughput_tok_s) if group == "batch" else "-"
            body.append(
                f'<tr><th scope="row">{name}</th><td>{label}</td>'
                f'<td class="num">{s.completed}</td>'
                f'<td class="num">{with_interval(s.ttft_p50.value, s.ttft_p50)}</td>'
                f'<td class="num">{with_interval(s.ttft_p99.value, s.ttft_p99)}</td>'
                f'<td class="num">{tput}</td></tr>')
    heads = ("run", "group", "requests (n)", "TTFT P50 (ms) [95% interval]",
             "TTFT P99 (ms) [95% interval]", "batch job tokens/s")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    return ('<table class="plain traffic-table"><caption>Each group\'s time to first token in '
            "each run, and the batch job's output tokens per second (its tokens over the time "
            "from its submission to its last token); &dagger;: too few requests to bound a P99"
            f"</caption><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def settings_html(result: TrafficClassesResult) -> str:
    """The classes each run was served with, as `python -m engine run --classes` takes them."""
    return (f'<p class="traffic-settings">The lanes, as the engine\'s <code>--classes</code> '
            f"option gives them: <code>{html.escape(result.lanes)}</code>; with the quota "
            f"(tenant_rate in tokens per second, tenant_burst in tokens): "
            f"<code>{html.escape(result.quota)}</code>. {result.max_batch} slots, prefill "
            f"chunks of {result.chunk_size} tokens, the {html.escape(result.preset)} model.</p>")


def verdict_lines(f: Findings) -> list[str]:
    lines = []
    (fifo, lanes), (b_fifo, b_lanes), (flood, quota) = f.chat_p99, f.batch_tok_s, f.flooded_p99
    if f.gain is not None:
        lines.append(f"- **What the chat users gain:** P99 TTFT {sig(fifo)} ms in one queue, "
                     f"{sig(lanes)} ms with lanes ({f.gain:.2f}x).")
    if f.batch_pays is not None:
        lines.append(f"- **What the batch job pays:** {sig(b_fifo)} tokens/s in one queue, "
                     f"{sig(b_lanes)} tokens/s with lanes ({f.batch_pays:.2f}x).")
    if f.quota_protects is not None:
        lines.append(f"- **What the quota protects:** under the flood the other chat users' P99 "
                     f"TTFT was {sig(flood)} ms without a quota and {sig(quota)} ms with one "
                     f"({f.quota_protects:.2f}x).")
    return lines


class TrafficClassesLesson(LessonPage):
    """Lesson 16: lanes for interactive and batch work, and a quota per tenant."""

    slug = "traffic-classes"
    job_noun = "runs"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    chat_rate = param.Number(default=5.0, bounds=(1.0, 20.0), step=1.0,
                             label="Chat requests per second")
    chat_requests = param.Integer(default=16, bounds=(4, 60), label="Chat requests")
    batch_requests = param.Integer(default=4, bounds=(1, 12), label="Summaries in the batch job")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: TrafficClassesResult | None = None
        self.stats: dict[str, dict[str, ClassStats]] = {}
        self.shown = Run(KIND, self.run_params())
        self.table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["traffic-verdict"])
        self.download = DataDownload("traffic-classes", self.download_rows,
                                     self.download_header, "Every group of every run")

    def run_params(self) -> dict:
        return {"chat_rate": float(self.chat_rate), "chat_requests": self.chat_requests,
                "batch_requests": self.batch_requests, "flood_requests": self.chat_requests}

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {"the runs": (KIND, self.run_params())}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        f = findings({r.name: run_stats(r) for r in cached.result.runs})
        return [line.removeprefix("- ").replace("**", "") for line in verdict_lines(f)]

    def start(self) -> None:
        self.table.object = self.verdict.object = ""
        self.shown = Run(KIND, self.run_params())
        self.runner.submit(KIND, self.run_params(), self.on_event)

    def on_event(self, event) -> None:
        if event.type != "result":
            return
        self.shown.done(event.result, event)
        self.result = event.result
        self.stats = {r.name: run_stats(r) for r in event.result.runs}
        f = findings(self.stats)
        self.table.object = table_html(self.stats) + settings_html(event.result)
        self.verdict.object = "\n".join(verdict_lines(f))
        outcome = prediction_outcome(f)
        if outcome is not None:
            self.prediction_box.reveal(*outcome)
        question = gain_question(f)
        if question is not None:
            self.checkpoint.provide("gain", question)
        self.say(f"The four runs {'from the cache' if event.cached else 'measured'}: "
                 + " ".join(line.removeprefix("- ").replace("**", "")
                            for line in verdict_lines(f)))

    @param.depends("chat_rate", "chat_requests", "batch_requests", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    def download_rows(self) -> list[dict]:
        """Each group of each run: its counts and figures (the formulas: engine.calc.traffic)."""
        out = []
        for run, groups in self.stats.items():
            for s in groups.values():
                out.append({"run": run, **s.to_dict()})
        return out

    def download_header(self) -> dict:
        return runs_header(self, {"four runs": self.shown},
                           columns="run: fifo (one queue), lanes, flood (lanes, a flooding "
                                   "tenant), quota (the same with a token bucket per tenant); "
                                   "name: the class, or interactive/flood for the flooding "
                                   "tenant; arrived, completed, refused: requests; "
                                   "ttft_p50_ms, ttft_p99_ms: value, 95% interval, n; "
                                   "output_tokens and span_s (first arrival to last finish); "
                                   "throughput_tok_s = output_tokens / span_s")

    def body(self) -> list:
        control = pn.Row(
            pn.widgets.FloatSlider.from_param(self.param.chat_rate, throttled=True,
                                              sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.chat_requests, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.batch_requests, throttled=True,
                                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        gpu = html_pane(f'<section class="on-a-gpu"><h2>On a GPU, and in real servers</h2>'
                        f"{GPU_TEXT}</section>")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), control,
                self.runner.status, self.verdict, self.table, self.download, gpu]
