"""Lesson 7: Chunked prefill. /app?lesson=chunked-prefill

Two real runs of the interference workload (engine `serve_run`, workload "interference"): a few
requests decoding, and one long prompt arriving at 0.2 s, served by continuous batching with the
long prompt prefilled whole (chunk size 0) and in chunks of the size the reader picks. The gaps
between tokens of the running requests are drawn over time (widgets.itl_timeline), live from the
runs' step events and then exactly from their token times; the long request's TTFT beside.

URL: chunk_size, requests, output_len, long_prompt:
/app?lesson=chunked-prefill&chunk_size=256&requests=4&output_len=60&long_prompt=1024
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import panel as pn
import param

from engine.lab.results import ServeRunResult, StepRecord
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.itl_timeline import ItlTimeline
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header
from .job_runner import event_record

SHORT_PROMPT = 64  # tokens of each running request's prompt
LONG_AT_S = 0.2  # when the long prompt arrives
MAX_BATCH = 16  # room for all running requests and the long one at once
WHOLE, CHUNKED = "prompt prefilled whole", "prompt in chunks"

INTRO = """
Continuous batching (lesson 3) lets a new request join the running batch at the next step. But
what happens in that step? A new request first needs its **prefill**: its whole prompt pushed
through the model. If the prompt is long, that single step is long, and every request already
streaming its answer waits for it. Their readers see the text stop, then resume: a **stall**.

**Chunked prefill** splits the long prompt into pieces of a fixed number of tokens and runs one
piece per step, beside the decode tokens of everyone else. No step grows much longer than a
piece, so the running requests keep their rhythm; the new request takes a few more steps to
reach its first token.
"""

SETUP = """
### The experiment

A few requests start together and decode their answers; at 0.2 s a long prompt arrives. The
engine serves the same requests twice, with continuous batching both times: once prefilling the
long prompt in one step, once in chunks. Each dot below is one gap between two consecutive
tokens of a running request, drawn when the later token arrived.
"""

QUOTE = """
> Splitting prefills into chunks and mixing them with decodes was introduced by
> **Sarathi-Serve** (Agrawal et al., *Taming Throughput-Latency Tradeoff in LLM Inference with
> Sarathi-Serve*, arXiv:2403.02310, 2024), which reported **up to 6.9x higher serving capacity for
> Falcon-180B** under latency targets (the paper's OSDI 2024 version gives 5.6x for that setup).
> Chunked prefill is on by default in recent versions of vLLM.

*A quoted result, measured by its authors on GPU clusters, not here.*
"""


@dataclass(frozen=True)
class RunSummary:
    """One of the two runs in figures: the running requests' gaps, the long prompt's cost."""

    chunk: int  # 0: the prompt prefilled whole
    worst_ms: float | None
    median_ms: float | None
    long_ttft_ms: float | None
    prefill_steps: int
    device: str


def chunk_label(chunk_size: int) -> str:
    return f"chunks of {chunk_size} tokens"


class ChunkedPrefillLesson(LessonPage):
    """Lesson 7: a long prompt's stall, and chunked prefill smoothing it."""

    slug = "chunked-prefill"
    job_noun = "runs"

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

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        page = cls()
        return [("serve_run", page.run_params(0)), ("serve_run", page.run_params(page.chunk_size))]

    def runs(self) -> list[tuple[str, int]]:
        """(series, chunk size) of the two runs."""
        return [(WHOLE, 0), (CHUNKED, self.chunk_size)]

    def start(self, fresh: bool = False) -> None:
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
            prefill_steps=prefill_steps, device=run.device)
        self._summarize()

    def _summarize(self) -> None:
        whole = self.results.get(WHOLE)
        chunked = self.results.get(CHUNKED)
        lines = []
        for name, r in ((WHOLE, whole), (f"{CHUNKED} of {self.chunk_size} tokens", chunked)):
            if r is None:
                continue
            lines.append(
                f"- **{name}:** worst gap **{sig(r.worst_ms)} ms**, median gap "
                f"{sig(r.median_ms)} ms; the long prompt took {r.prefill_steps} "
                f"step{'s' if r.prefill_steps != 1 else ''} to prefill and its TTFT was "
                f"**{sig(r.long_ttft_ms)} ms**.")
        if whole and chunked and whole.worst_ms and chunked.worst_ms:
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
        md = lambda text: pn.pane.Markdown(text, sizing_mode="stretch_width")  # noqa: E731
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
        return [md(INTRO), md(SETUP), controls, self.again, self.runner.status, self.timeline,
                self.download, self.verdict, md(QUOTE)]

    def questions(self) -> list:
        return [
            Question("A long prompt arrives while others are streaming. Without chunking, why "
                     "do their answers stall?", (
                Choice("Its whole prefill runs as one step, and no running request gets a token "
                       "until that step ends.", True,
                       "A step ends when all its work is done; one huge prefill makes one huge "
                       "step, and every decode in it waits."),
                Choice("The long prompt takes their KV cache away.", False,
                       "Their caches stay; here the pool has room for everyone. The wait is "
                       "for the step to finish."),
                Choice("The scheduler pauses decoding on purpose to give prefill priority.",
                       False, "The decodes run in the same step; they just cannot finish before "
                       "the prefill in it does."))),
            Question("What does chunking cost?", (
                Choice("The long request's first token usually comes a little later: its "
                       "prompt needs several steps, each shared with decodes.", True,
                       "That is the trade: a small rise in one request's TTFT for a steady "
                       "rhythm for everyone else."),
                Choice("Every request's answer changes.", False,
                       "The tokens are the same; only when they are computed changes."),
                Choice("Nothing at all.", False,
                       "More steps each carry overhead, so the long prompt takes somewhat "
                       "longer to prefill in total."))),
            Question("You shrink the chunk size from 512 to 32 tokens. What happens?", (
                Choice("The worst gap shrinks further, but the long prompt needs many more "
                       "steps, so its TTFT grows.", True,
                       "Small chunks bound each step tightly but waste the machine's efficiency "
                       "on large matrices; engines pick a few hundred tokens."),
                Choice("Nothing changes, since the prompt is the same length.", False,
                       "The chunk size sets how long each step can be: try it above."),
                Choice("The worst gap grows.", False,
                       "Smaller pieces make shorter steps, so the running requests wait less."))),
        ]
