"""Lesson 7: Chunked prefill. /app?lesson=chunked-prefill

Two real runs of the interference workload (engine `serve_run`, workload "interference"): a few
requests decoding, and one long prompt arriving at 0.2 s, served by continuous batching with the
long prompt prefilled whole (chunk size 0) and in chunks of the size the reader picks. The gaps
between tokens of the running requests are drawn over time (widgets.itl_timeline), live from the
runs' step events and then exactly from their token times; the long request's TTFT beside.

URL: chunk_size, requests, output_len, long_prompt:
/app?lesson=chunked-prefill&chunk_size=256&requests=4&output_len=60&long_prompt=1024

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/chunked_prefill.py; this module is its view.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from engine.lab.results import ServeRunResult, StepRecord
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.itl_timeline import ItlTimeline
from widgets.tables import sig, with_interval

from .base import LessonPage
from .data_record import Run, check_cell, runs_header, spread_cell
from .job_runner import event_record
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached
from .words.chunked_prefill import (
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

SHORT_PROMPT = 64  # tokens of each running request's prompt
LONG_AT_S = 0.2  # when the long prompt arrives
MAX_BATCH = 16  # room for all running requests and the long one at once
WHOLE, CHUNKED = "prompt prefilled whole", "prompt in chunks"


GPU_MODEL = LLAMA_3_8B
LONG_PROMPT_THERE = 8000  # tokens: a long document pasted into a chat


def gpu_finding(machines: list[Machine], long_prompt: int, chunk: int) -> str:
    """Lesson 7's finding on each machine: the stall of a whole prefill, and of one chunk."""
    def floor(m: Machine, tokens: int) -> str:
        return sig(prefill_floor_ms(GPU_MODEL, m, tokens))

    table = machine_table(machines, (
        (f"{long_prompt:,} tokens whole: stall at least (ms)", lambda m: floor(m, long_prompt)),
        (f"{LONG_PROMPT_THERE:,} tokens whole (ms)", lambda m: floor(m, LONG_PROMPT_THERE)),
        (f"one chunk of {chunk} tokens (ms)", lambda m: floor(m, chunk)),
        ("a decode step at batch 8, for comparison (ms)",
         lambda m: sig(step_floor_ms(decode_step(GPU_MODEL, 8, 1000), m))),
    ), f"{GPU_MODEL.name} in bf16: the least time a prefill step can take")
    return GPU_TEXT + table


def ttft_question(whole: RunSummary, chunked: RunSummary, chunk_size: int) -> Question | None:
    """Which run gave the long request the later first token (the key is the reader's runs)."""
    a, b = whole.long_ttft_ms, chunked.long_ttft_ms
    if a is None or b is None:
        return None
    why = (f"Your runs: the long request's TTFT was {sig(a)} ms prefilled whole and {sig(b)} ms "
           f"in chunks of {chunk_size} tokens.")
    close = abs(a - b) <= 0.05 * max(a, b)
    return Question(
        "In your two runs, when did the long request get its first token?", (
            Choice("Later in chunks", not close and b > a, why),
            Choice("Later prefilled whole", not close and a > b, why),
            Choice("About the same time (within 5%)", close, why)))


def chunk_outcome(whole: RunSummary, chunked: RunSummary) -> tuple[str, str] | None:
    """Which prediction choice the two runs support."""
    if not whole.worst_ms or not chunked.worst_ms:
        return None
    shorter = chunked.worst_ms < 0.8 * whole.worst_ms
    longer_ttft = (chunked.long_ttft_ms or 0) > (whole.long_ttft_ms or 0)
    choice = ("Worst gap about the same or longer" if not shorter
              else "Worst gap shorter, its TTFT longer" if longer_ttft
              else "Worst gap shorter, its TTFT shorter too")
    return choice, (f"worst gap {sig(whole.worst_ms)} ms whole, {sig(chunked.worst_ms)} ms in "
                    f"chunks; TTFT {sig(whole.long_ttft_ms)} ms whole, "
                    f"{sig(chunked.long_ttft_ms)} ms in chunks")


@dataclass(frozen=True)
class RunSummary:
    """One of the two runs in figures: the running requests' gaps, the long prompt's cost."""

    chunk: int  # 0: the prompt prefilled whole
    worst_ms: float | None
    median_ms: float | None
    long_ttft_ms: float | None
    prefill_steps: int
    device: str
    check: str = "not checked"  # data_record.check_cell: quiet, DISTURBED: why, not checked
    steps_spread: str = "\u2013"  # its engine steps' p10-p90 (ms)

    @property
    def disturbed(self) -> bool:
        return self.check.startswith("DISTURBED")


CHECK_WORDS = {"quiet": " Nothing else took the engine's core while it ran.",
               "not checked": ""}  # a disturbed run's check is shown as it is


def chunk_label(chunk_size: int) -> str:
    return f"chunks of {chunk_size} tokens"


class ChunkedPrefillLesson(LessonPage):
    """Lesson 7: a long prompt's stall, and chunked prefill smoothing it."""

    slug = "chunked-prefill"
    job_noun = "runs"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    chunk_size = param.Integer(default=128, bounds=(16, 1024), label="Chunk size (tokens)",
                               doc="How many prompt tokens one step may prefill.")
    requests = param.Integer(default=8, bounds=(1, 15), label="Requests already decoding")
    output_len = param.Integer(default=160, bounds=(16, 400),
                               label="Tokens each request writes")
    long_prompt = param.Integer(default=1536, bounds=(256, 1600),
                                label="Long prompt (tokens)")

    def __init__(self, **params):
        super().__init__(**params)
        self.timeline = ItlTimeline(series=[WHOLE, CHUNKED])
        self.results: dict[str, RunSummary] = {}
        self.shown: dict[str, Run] = {}  # the runs the timeline draws, for its download
        self.download = DataDownload("token-gaps", self.timeline.rows, self.download_header,
                                     "Every gap the chart draws")
        self._last: dict[str, dict[int, float]] = {}
        self._tokens: dict[str, int] = {}
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["chunk-verdict"])
        self.again = pn.widgets.Button(label="Run both again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(lambda machines: gpu_finding(machines, self.long_prompt,
                                                           self.chunk_size))

    # ---- jobs ----------------------------------------------------------------------------------------
    @property
    def long_id(self) -> int:
        """The interference workload gives the long request the last id."""
        return self.requests

    def run_params(self, chunk_size: int) -> dict:
        return {"workload": "interference", "policy": "continuous", "requests": self.requests,
                "prompt_len": [SHORT_PROMPT, SHORT_PROMPT],
                "output_len": [self.output_len, self.output_len],
                "long_prompt_len": self.long_prompt, "long_at": LONG_AT_S,
                "max_batch": MAX_BATCH, "chunk_size": chunk_size, "stream_tokens": False}

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {WHOLE: ("serve_run", self.run_params(0)),
                CHUNKED: ("serve_run", self.run_params(self.chunk_size))}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        run = cached.result
        gaps = [1000 * (b - a) for r in run.requests if r.id != self.long_id
                for a, b in zip(r.token_s, r.token_s[1:], strict=False)]
        long = next(r for r in run.requests if r.id == self.long_id)
        ttft = 1000 * (long.first_token_s - long.arrival_s)
        return [f"{label}: worst gap {sig(max(gaps))} ms, median "
                f"{sig(statistics.median(gaps))} ms; the long prompt's TTFT {sig(ttft)} ms; the "
                f"run lasted {run.metrics.duration_s or 0:.1f} s"]

    def runs(self) -> list[tuple[str, int]]:
        """(series, chunk size) of the two runs."""
        return [(WHOLE, 0), (CHUNKED, self.chunk_size)]

    def start(self, fresh: bool = False) -> None:
        self.gpu_box.fetch(self.jobs)
        self.results.clear()
        self.verdict.object = ""
        jobs = []
        for series, chunk in self.runs():
            self.timeline.clear(series)
            self._last[series] = {}
            self._tokens[series] = 0
            self.shown[series] = Run("serve_run", self.run_params(chunk))
            jobs.append(("serve_run", self.run_params(chunk), self._handler(series, chunk)))
        self.runner.run(jobs, use_cache=not fresh)

    def _handler(self, series: str, chunk: int):
        def on_event(event):
            if event.type == "step":
                self.on_step(series, chunk, event_record(StepRecord, event.data))
            elif event.type == "result":
                self.show_run(series, chunk, event.result, event)
        return on_event

    @param.depends("chunk_size", "requests", "output_len", "long_prompt", watch=True)
    def _settings_changed(self) -> None:
        self.gpu_box.refresh()
        if self.started:
            self.start()

    # ---- live: gaps from the steps as they finish ----------------------------------------------------
    def on_step(self, series: str, chunk: int, step: StepRecord) -> None:
        """Each decode step gives every request in it one token: its gap is this step's end
        minus the end of the last step that request was in (the previous token, or the final
        chunk of its prompt, which gave its first token)."""
        end = step.end_s
        last = self._last[series]
        ts, gaps, ids = [], [], []
        for rid in step.decode_ids:
            if rid != self.long_id and rid in last:
                ts.append(end)
                gaps.append(1000 * (end - last[rid]))
                ids.append(rid)
            last[rid] = end
        for rid, _n in step.prefill_chunks:
            last[rid] = end
        self.timeline.stream(series, ts, gaps, ids)
        self._tokens[series] += len(step.decode_ids)
        total = (self.requests + 1) * (self.output_len - 1)
        self.runner.status.job_progress(self._tokens[series], total,
                                        f"{chunk_label(chunk) if chunk else series}, "
                                        f"{end:.1f} s into the run")

    # ---- final: gaps from every token's time ---------------------------------------------------------
    def show_run(self, series: str, chunk: int, run: ServeRunResult, event=None) -> None:
        self.shown.setdefault(series, Run("serve_run", self.run_params(chunk))).done(run, event)
        long = next(r for r in run.requests if r.id == self.long_id)
        ts, gaps, ids = [], [], []
        for r in run.requests:
            if r.id == self.long_id:
                continue
            times = r.token_s
            for a, b in zip(times, times[1:], strict=False):
                ts.append(b)
                gaps.append(1000 * (b - a))
                ids.append(r.id)
        self.timeline.set(series, ts, gaps, ids)
        self.timeline.mark(series, "long prompt arrives", long.arrival_s)
        if long.first_token_s is not None:
            self.timeline.mark(series, "its first token", long.first_token_s)
        prefill_steps = sum(1 for s in run.steps
                            if any(i == self.long_id for i, _ in s.prefill_chunks))
        self.results[series] = RunSummary(
            chunk=chunk, worst_ms=max(gaps) if gaps else None,
            median_ms=statistics.median(gaps) if gaps else None,
            long_ttft_ms=1000 * (long.first_token_s - long.arrival_s)
            if long.first_token_s is not None else None,
            prefill_steps=prefill_steps, device=run.device, check=check_cell(run),
            steps_spread=spread_cell(run))
        self._summarize()

    def _summarize(self) -> None:
        whole = self.results.get(WHOLE)
        chunked = self.results.get(CHUNKED)
        if whole and chunked:
            outcome = chunk_outcome(whole, chunked)
            if outcome is not None and not (whole.disturbed or chunked.disturbed):
                self.prediction_box.reveal(*outcome)
            question = ttft_question(whole, chunked, self.chunk_size)
            if question is not None:
                self.checkpoint.provide("ttft", question)
        lines = []
        for series, name, r in ((WHOLE, WHOLE, whole),
                                (CHUNKED, f"{CHUNKED} of {self.chunk_size} tokens", chunked)):
            if r is None:
                continue
            median = self.timeline.estimates.get(series, {}).get(50)
            counted = f" of {median.n} gaps" if median is not None else ""
            lines.append(
                f"- **{name}:** worst gap **{sig(r.worst_ms)} ms**, median gap "
                f"{with_interval(r.median_ms, median)} ms{counted} (95% interval in brackets); "
                f"the long prompt took {r.prefill_steps} "
                f"step{'s' if r.prefill_steps != 1 else ''} to prefill and its TTFT was "
                f"**{sig(r.long_ttft_ms)} ms**; its engine steps took {r.steps_spread} ms "
                f"(p10 to p90).{CHECK_WORDS.get(r.check, ' **' + r.check + '**')}")
        disturbed = [f"the run with the {name}" for name, r in ((WHOLE, whole), (CHUNKED, chunked))
                     if r is not None and r.disturbed]
        if disturbed and whole and chunked:
            lines.append(f"\nOther work took the engine's core during {' and '.join(disturbed)}, "
                         "so the gaps above are partly its stalls, not the engine's: this "
                         "comparison says nothing about chunks. Run both again when the machine "
                         "is quiet.")
        elif whole and chunked and whole.worst_ms and chunked.worst_ms:
            ratio = whole.worst_ms / chunked.worst_ms
            ttft_change = chunked.long_ttft_ms - whole.long_ttft_ms
            if ratio > 1:
                comparison = f"In chunks, the worst stall is **{ratio:.1f}x shorter**"
            else:
                comparison = ("Here chunks did not shorten the worst stall (the prompt may be too "
                              "short, or the chunk too large, to matter)")
            cost = (f"the long request paid {sig(ttft_change)} ms more TTFT for it"
                    if ttft_change > 0 else
                    f"the long request even got its first token {sig(-ttft_change)} ms sooner")
            lines.append(f"\n{comparison}; {cost}.")
        self.verdict.object = "\n".join(lines)
        if lines:  # the newest run's line, or with both runs the comparison
            self.say(lines[-1])

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown, marks_s={name: dict(marks)
                                       for name, marks in self.timeline.marks.items()},
            columns="run: the long prompt prefilled whole or in chunks; t_s: when the token "
                    "came (s since the run started); gap_ms: the time since that request's "
                    "previous token (the long request's own tokens left out); request: its id. "
                    "marks_s: the vertical lines (the long prompt's arrival, its first token)")

    # ---- the page ------------------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.IntSlider.from_param(self.param.chunk_size, step=16, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.requests, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.output_len, step=8, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.long_prompt, step=64, throttled=True,
                                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls, self.again,
                self.runner.status, self.timeline, self.download, self.verdict, html_pane(QUOTE),
                self.gpu_box]

