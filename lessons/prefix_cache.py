"""Lesson 9: Prefix caching. /app?lesson=prefix-cache

Two real runs of the engine's `prefix_cache` job: the same requests, each a shared system prompt
followed by a few tokens of its own, served one at a time from a cold start, with the prefix
cache off and on. Each request's TTFT is drawn for both runs, and for the run with the cache
each request's prompt is drawn as its 16-token KV blocks: the ones it found in the cache and
the ones it computed. The verdict compares the later requests' TTFT and gives the cache's hit
rate.

URL: shared_prefix, requests: /app?lesson=prefix-cache&shared_prefix=512&requests=4

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/prefix_cache.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_savings import prefix_hit_saving_ms
from engine.calc.gpu_scaling import LLAMA_3_8B, Machine, prefill_floor_ms
from engine.calc.stats import Estimate, estimate
from engine.lab.results import PrefixCacheResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import sig

from .base import LessonPage
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox, machine_table
from .teaching import Cached
from .words.prefix_cache import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    SETUP,
    TAKEAWAY,
    WHEN_IT_HITS,
)

OWN_PROMPT = [32, 64]  # tokens of each request's own question, after the shared prompt
OUTPUT_TOKENS = 4  # enough for a first token; TTFT is what this lesson measures
OFF, ON = "cache off", "cache on"


GPU_MODEL = LLAMA_3_8B
LONG_SHARED_THERE = 4000  # tokens: a long system prompt with a few examples


def gpu_finding(machines: list[Machine], shared: int) -> str:
    """Lesson 9's finding on each machine: the prefill floor a cache hit removes,
    floor(shared + own) - floor(own) (engine.calc.gpu_savings)."""
    own = round(sum(OWN_PROMPT) / 2)

    def saving(m: Machine, tokens: int) -> str:
        return sig(prefix_hit_saving_ms(GPU_MODEL, m, tokens, own)) if tokens else "0"

    table = machine_table(machines, (
        (f"{shared:,} shared tokens alone (ms)", lambda m: sig(prefill_floor_ms(
            GPU_MODEL, m, shared))),
        (f"a hit on {shared:,} shared tokens saves (ms)", lambda m: saving(m, shared)),
        (f"a hit on {LONG_SHARED_THERE:,} shared tokens saves (ms)",
         lambda m: saving(m, LONG_SHARED_THERE)),
    ), f"{GPU_MODEL.name} in bf16, {own} tokens of each request's own: prefill floors")
    return GPU_TEXT + table


@dataclass(frozen=True)
class RunSummary:
    """One of the two runs in figures; later: the later requests' mean TTFT as an estimate
    (its 95% bootstrap interval and how many requests it rests on)."""

    first_ms: float
    later_ms: float | None
    cached_tokens: int  # in the later requests, together
    prompt_tokens: int  # of every request, together
    hit_rate: float | None
    device: str
    later: Estimate | None = None


def summarize(run: PrefixCacheResult) -> RunSummary:
    return RunSummary(
        first_ms=run.first_ttft_ms, later_ms=run.later_ttft_ms,
        cached_tokens=sum(r.cached_tokens for r in run.requests),
        prompt_tokens=sum(r.prompt_tokens for r in run.requests),
        hit_rate=run.stats.token_hit_rate if run.stats else None, device=run.device,
        later=estimate([r.ttft_ms for r in run.requests[1:]]))


def later_text(s: RunSummary) -> str:
    """'**41.2 ms** on average (95% interval 39.8–43.0 ms, 4 requests)'."""
    e = s.later
    if e is None:
        return f"**{sig(s.later_ms)} ms** on average"
    if e.lo is None or e.n < 2:
        return f"**{sig(s.later_ms)} ms** ({e.n} request{'s' if e.n != 1 else ''})"
    return (f"**{sig(s.later_ms)} ms** on average (95% interval {sig(e.lo)}–{sig(e.hi)} ms, "
            f"{e.n} requests)")


def cache_outcome(off: RunSummary, on: RunSummary) -> tuple[str, str] | None:
    """Which prediction choice the two runs support."""
    if not off.later_ms or not on.later_ms:
        return None
    ratio = off.later_ms / on.later_ms
    choice = ("Several times shorter (3x or more)" if ratio >= 3 else
              "Somewhat shorter (up to 3x)" if ratio >= 1.15 else "About the same")
    return choice, (f"the later requests' TTFT was {sig(off.later_ms)} ms with the cache off and "
                    f"{sig(on.later_ms)} ms with it on: {ratio:.1f}x")


def cached_question(run: PrefixCacheResult) -> Question | None:
    """How many of the second request's tokens came from the cache (the key is the reader's
    run: the shared prompt's full blocks)."""
    if not run.prefix_cache or len(run.requests) < 2:
        return None
    second = run.requests[1]
    shared, got = run.shared_prefix_len, second.cached_tokens
    options = {got, shared, second.prompt_tokens, 0}
    if len(options) < 3:
        return None
    why = (f"Your run: request 2's prompt was {second.prompt_tokens} tokens, the first "
           f"{shared} shared; {got} came from the cache, the shared prompt's full "
           f"{run.block_size}-token blocks.")
    choices = [Choice(f"{n:,} tokens", n == got, why) for n in sorted(options)]
    return Question("In your run with the cache, how many of request 2's prompt tokens came "
                    "from the cache?", tuple(choices))


def blocks_html(run: PrefixCacheResult) -> str:
    """Each request's prompt as its KV blocks: taken from the cache, or computed."""
    bs = run.block_size
    rows = []
    for r in run.requests:
        cached = r.cached_tokens // bs
        total = -(-r.prompt_tokens // bs)
        cells = ('<span class="blk hit"></span>' * cached +
                 '<span class="blk miss"></span>' * (total - cached))
        rows.append(f'<tr><th scope="row">request {r.id + 1}</th><td class="num">'
                    f'{r.cached_tokens} of {r.prompt_tokens}</td><td class="blocks">{cells}'
                    "</td></tr>")
    return (
        "<style>.blk,.key{display:inline-block;width:6px;height:12px;margin:0 1px 1px 0}"
        ".hit{background:#2b8a3e}.miss{background:#adb5bd}</style>"
        '<table class="plain prefix-blocks"><caption>With the cache on: each prompt\'s '
        f'{bs}-token KV blocks, <span class="key hit"></span> green: taken from the cache, '
        '<span class="key miss"></span> grey: computed</caption><thead><tr>'
        '<th scope="col">request</th><th scope="col">tokens from the cache</th>'
        f'<th scope="col">blocks</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def ttft_table_html(runs: dict[str, PrefixCacheResult]) -> str:
    """Each request's TTFT in each run (ms)."""
    count = max(len(r.requests) for r in runs.values())
    head = "".join(f'<th scope="col">TTFT, {name} (ms)</th>' for name in runs)
    rows = []
    for i in range(count):
        cells = "".join(f'<td class="num">{sig(run.requests[i].ttft_ms)}</td>'
                        if i < len(run.requests) else "<td></td>" for run in runs.values())
        rows.append(f'<tr><th scope="row">request {i + 1}</th>{cells}</tr>')
    return (f'<table class="plain prefix-ttft"><caption>Time to first token of each request, '
            f'one at a time</caption><thead><tr><th scope="col">request</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


class PrefixCacheLesson(LessonPage):
    """Lesson 9: the TTFT a shared system prompt costs, and the prefix cache taking it away."""

    slug = "prefix-cache"
    job_noun = "runs"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    shared_prefix = param.Integer(default=1024, bounds=(0, 1536),
                                  label="Shared system prompt (tokens)",
                                  doc="How many tokens every prompt starts with.")
    requests = param.Integer(default=5, bounds=(2, 12), label="Requests")

    def __init__(self, **params):
        super().__init__(**params)
        self.runs: dict[str, PrefixCacheResult] = {}
        self.ttft = pn.pane.HTML("", sizing_mode="stretch_width")
        self.blocks = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["prefix-verdict"])
        self.shown: dict[str, Run] = {}  # the two runs the table draws, for its download
        self.download = DataDownload("prefix-cache-ttft", self.download_rows,
                                     self.download_header, "Each request's TTFT in both runs")
        self.again = pn.widgets.Button(label="Run both again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(lambda machines: gpu_finding(machines, self.shared_prefix))

    # ---- jobs ------------------------------------------------------------------------------
    def run_params(self, cache: bool) -> dict:
        return {"prefix_cache": cache, "shared_prefix_len": self.shared_prefix,
                "requests": self.requests, "prompt_len": OWN_PROMPT,
                "output_len": OUTPUT_TOKENS}

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        return {OFF: ("prefix_cache", self.run_params(False)),
                ON: ("prefix_cache", self.run_params(True))}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        s = summarize(cached.result)
        return [f"{label}: first request's TTFT {sig(s.first_ms)} ms, the later ones' "
                f"{sig(s.later_ms)} ms on average; {s.cached_tokens} prompt tokens from the cache"]

    def start(self, fresh: bool = False) -> None:
        self.gpu_box.fetch(self.jobs)
        self.runs.clear()
        self.ttft.object = self.blocks.object = self.verdict.object = ""
        self.shown = {name: Run("prefix_cache", self.run_params(cache))
                      for name, cache in ((OFF, False), (ON, True))}
        self.runner.run([(run.kind, run.params, self._handler(name))
                         for name, run in self.shown.items()], use_cache=not fresh)

    def _handler(self, name: str):
        def on_event(event):
            if event.type == "result":
                self.shown[name].done(event.result, event)
                self.show_run(name, event.result)
                self.announce_run(name, bool(event.cached))
        return on_event

    def announce_run(self, name: str, cached: bool) -> None:
        """The status region speaks the run that came, as other lessons speak their points."""
        s = summarize(self.runs[name])
        text = (f"{name} {'from the cache' if cached else 'measured'}: first request's TTFT "
                f"{sig(s.first_ms)} ms, the later ones' {sig(s.later_ms)} ms")
        if OFF in self.runs and ON in self.runs:
            off, on = summarize(self.runs[OFF]), summarize(self.runs[ON])
            if off.later_ms and on.later_ms:
                text += (f"; with the cache the later requests' first token came "
                         f"{off.later_ms / on.later_ms:.1f}x sooner")
        self.say(text[0].upper() + text[1:] + ".")

    @param.depends("shared_prefix", "requests", watch=True)
    def _settings_changed(self) -> None:
        self.gpu_box.refresh()
        if self.started:
            self.start()

    # ---- results ---------------------------------------------------------------------------
    def show_run(self, name: str, run: PrefixCacheResult) -> None:
        self.runs[name] = run
        self.ttft.object = ttft_table_html({n: self.runs[n] for n in (OFF, ON)
                                            if n in self.runs})
        if name == ON:
            self.blocks.object = blocks_html(run)
            question = cached_question(run)
            if question is not None:
                self.checkpoint.provide("cached", question)
        self._summarize()

    def _summarize(self) -> None:
        off = summarize(self.runs[OFF]) if OFF in self.runs else None
        on = summarize(self.runs[ON]) if ON in self.runs else None
        lines = []
        for name, s in ((OFF, off), (ON, on)):
            if s is None:
                continue
            lines.append(f"- **{name}:** the first request's TTFT {sig(s.first_ms)} ms, the later "
                         f"ones' {later_text(s)}.")
        if off and on:
            outcome = cache_outcome(off, on)
            if outcome is not None:
                self.prediction_box.reveal(*outcome)
                ratio = off.later_ms / on.later_ms
                lines.append(
                    f"\nWith the cache the later requests got their first token **{ratio:.1f}x "
                    f"sooner**: {on.cached_tokens:,} of the {on.prompt_tokens:,} prompt tokens "
                    f"of all {len(self.runs[ON].requests)} requests came from the cache, a hit "
                    f"rate of "
                    f"{100 * (on.hit_rate or 0):.0f}%.")
        self.verdict.object = "\n".join(lines)

    def download_rows(self) -> list[dict]:
        """The TTFT table's cells: each request of each run, with its prompt and cached tokens."""
        return [{"run": name, "request": r.id + 1, "prompt_tokens": r.prompt_tokens,
                 "cached_tokens": r.cached_tokens, "ttft_ms": r.ttft_ms}
                for name in (OFF, ON) if name in self.runs for r in self.runs[name].requests]

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown or {name: Run("prefix_cache", self.run_params(cache))
                                 for name, cache in ((OFF, False), (ON, True))},
            columns="run: cache off or on; request: its place in the order served (one at a "
                    "time); prompt_tokens: its prompt, the shared part first; cached_tokens: "
                    "those taken from the prefix cache; ttft_ms: arrival to first token")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.IntSlider.from_param(self.param.shared_prefix, step=16, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.requests, throttled=True,
                                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls, self.again,
                self.runner.status, self.verdict, self.ttft, self.download, self.blocks,
                html_pane(WHEN_IT_HITS), html_pane(QUOTE), self.gpu_box]

