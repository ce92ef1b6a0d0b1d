"""Lesson 13: Batch invariance. /app?lesson=batch-invariance

Real runs of the engine's `invariance` job (engine/invariance.py) on the trained tiny preset: one
greedy 48-token prompt alone and inside batches of 2 to 64 rows, 32 new tokens, 4 prompts; the
largest logit difference from the prompt alone (ULP and absolute), where the text first differs,
how many texts differ (with a 95% Wilson interval). Three runs: the default mode with whole
prefills, the default mode with chunked prefill, and the batch-invariant mode with chunked
prefill, whose every difference must be zero; its decode step beside the default one's at each
batch gives the cost (engine.calc.invariance).

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/batch_invariance.py; this module is its view.
"""

from __future__ import annotations

import panel as pn
import param

from engine.calc.invariance import cost_ratio, outcome, wilson_interval
from engine.lab.results import InvarianceBatch, InvarianceResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import html_table, sig, table_pane

from .base import LessonPage
from .data_record import Run, check_cell, runs_header
from .on_a_gpu import GpuBox
from .teaching import Cached
from .words.batch_invariance import (
    GPU_TEXT,
    INSTRUCTOR,
    INTRO,
    INVARIANT,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    SETUP,
    TAKEAWAY,
    WHY,
)

BATCHES = [1, 2, 8, 32, 64]
CHUNK = 16
COMMON = {"preset": "tiny", "prompt_len": 48}
RUNS = {  # label: the job's parameters beyond COMMON
    "default": {"seeds": 4, "chunk": 0, "batch_invariant": False},
    "default, chunked prefill": {"seeds": 4, "chunk": CHUNK, "batch_invariant": False},
    "batch-invariant, chunked prefill": {"seeds": 1, "chunk": CHUNK, "batch_invariant": True},
}
DEFAULT, CHUNKED, INVARIANT_RUN = RUNS


def gpu_finding(machines) -> str:
    """The box's own part: why GPUs are not invariant by default, and the engines' modes."""
    return GPU_TEXT


def first_diff_cell(point: InvarianceBatch) -> str:
    firsts = [s.first_diff for s in point.seeds if s.first_diff is not None]
    return "none" if not firsts else f"token {min(firsts)}"


def share_cell(point: InvarianceBatch) -> str:
    """'1 of 4 (1%-81%)': texts that differ, with the 95% Wilson interval of the share."""
    n = len(point.seeds)
    lo, hi = wilson_interval(point.texts_differ, n)
    return f"{point.texts_differ} of {n} ({100 * lo:.0f}%\u2013{100 * hi:.0f}%)"


def moved_cell(point: InvarianceBatch) -> str:
    """The share of compared logits whose bits differ at all."""
    differing = sum(s.differing_logits for s in point.seeds)
    compared = sum(s.compared_logits for s in point.seeds)
    return f"{100 * differing / compared:.1f}%" if compared else "-"


def comparison_table(result: InvarianceResult, caption: str) -> str:
    rows = [(p.batch, share_cell(p), first_diff_cell(p), f"{p.max_ulp:,}", f"{p.max_abs:.2e}",
             moved_cell(p), sig(p.step_ms)) for p in result.points]
    return html_table(caption, ("batch (rows)", "texts that differ (95% interval)",
                                "first differing token", "largest difference (ULP)",
                                "largest difference (absolute)", "logits that moved",
                                "decode step (ms)"),
                      rows, numeric=[False, False, False, True, True, True, True])


def cost_rows(default: InvarianceResult, invariant: InvarianceResult) -> list[tuple]:
    """(batch, default step ms, invariant step ms, invariant / default) where both timed it."""
    steps = {p.batch: p.step_ms for p in default.points}
    rows = []
    for p in invariant.points:
        base = steps.get(p.batch)
        if base and p.step_ms:
            rows.append((p.batch, base, p.step_ms, cost_ratio(p.step_ms, base)))
    return rows


def cost_table(rows: list[tuple]) -> str:
    return html_table(
        "Decode step with chunked prefill, median, in both modes",
        ("batch (rows)", "default (ms)", "batch-invariant (ms)", "invariant / default"),
        [(b, sig(d), sig(i), f"{r:.1f}x") for b, d, i, r in rows],
        numeric=[False, True, True, True])


def verdict(result: InvarianceResult, what: str) -> str:
    """The run in words: alone twice, where the logits first moved, whether any text changed."""
    alone = next((p for p in result.points if p.batch == 1), None)
    moved = [p for p in result.points if p.batch > 1 and p.max_ulp > 0]
    changed = [p for p in result.points if p.texts_differ]
    lines = []
    if alone is not None:
        lines.append(f"**{what}.** Alone again (batch 1): largest difference "
                     f"**{alone.max_ulp:,} ULP**" + (" (the same bits)." if alone.max_ulp == 0
                                                   else "."))
    else:
        lines.append(f"**{what}.**")
    if moved:
        lines.append(f"Inside a batch the logits moved from batch **{moved[0].batch}** on, by "
                     f"at most **{max(p.max_abs for p in moved):.1e}** "
                     f"({max(p.max_ulp for p in moved):,} ULP).")
    else:
        lines.append("Inside every batch the logits kept the same bits.")
    if changed:
        lines.append("The text changed in " + ", ".join(
            f"{p.texts_differ} of {len(p.seeds)} prompts at batch {p.batch}" for p in changed)
            + ".")
    else:
        lines.append("No prompt's text changed: the moved bits never flipped a near-tie here.")
    return " ".join(lines)


def prediction_outcome(result: InvarianceResult) -> tuple[str, str]:
    """The choice the largest batch of the default run supports, and its numbers."""
    point = max(result.points, key=lambda p: p.batch)
    choice = PREDICTION.choices[outcome(point.max_ulp, point.texts_differ, len(point.seeds))]
    return choice, (f"at batch {point.batch}: largest logit difference {point.max_ulp:,} ULP "
                    f"({point.max_abs:.1e}), {point.texts_differ} of {len(point.seeds)} texts "
                    "differ")


def first_move_question(result: InvarianceResult) -> Question:
    """At which batch the logits first moved in the reader's default run (or never)."""
    moved = [p.batch for p in result.points if p.batch > 1 and p.max_ulp > 0]
    first = moved[0] if moved else None
    why = "Your run, largest difference at each batch: " + ", ".join(
        f"batch {p.batch} {p.max_ulp:,} ULP" for p in result.points) + "."
    options = [Choice(f"At batch {p.batch}", p.batch == first, why) for p in result.points
               if p.batch > 1]
    options.append(Choice("At none: every batch gave the same bits", first is None, why))
    return Question("In your default run (whole prefills), at which batch size did the "
                    "prompt's logits first differ from its logits alone?", tuple(options))


class BatchInvarianceLesson(LessonPage):
    """Lesson 13: the same prompt alone and in batches; the invariant mode and its cost."""

    slug = "batch-invariance"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    largest_batch = param.Selector(default=64, objects=[8, 32, 64], label="Largest batch",
                                   doc="The batches run: 1 (alone), 2, 8, 32 and 64 rows, up to "
                                       "this one.")
    new_tokens = param.Integer(default=32, bounds=(4, 64), label="New tokens per prompt",
                               doc="Greedy tokens each prompt decodes, alone and in a batch.")

    def __init__(self, **params):
        super().__init__(**params)
        self.results: dict[str, InvarianceResult] = {}
        self.shown: dict[str, Run] = {}
        self.tables = {label: table_pane() for label in RUNS}
        self.verdicts = {label: pn.pane.Markdown("", sizing_mode="stretch_width",
                                                 css_classes=["invariance-verdict"])
                         for label in RUNS}
        self.cost = table_pane()
        self.cost_words = pn.pane.Markdown("", sizing_mode="stretch_width",
                                           css_classes=["invariance-cost"])
        self.download = DataDownload("batch-invariance", self.download_rows,
                                     self.download_header, "The measured comparisons")
        self.again = pn.widgets.Button(label="Measure again (not from the cache)")
        self.again.on_click(lambda _e: self.start(fresh=True))
        self.gpu_box = GpuBox(gpu_finding)

    # ---- jobs ------------------------------------------------------------------------------
    def batches(self) -> list[int]:
        return [b for b in BATCHES if b <= self.largest_batch]

    def default_jobs(self) -> dict[str, tuple[str, dict]]:
        settings = {**COMMON, "batch_sizes": self.batches(), "new_tokens": self.new_tokens}
        return {label: ("invariance", {**settings, **more}) for label, more in RUNS.items()}

    def expected_lines(self, label: str, kind: str, cached: Cached) -> list[str]:
        r = cached.result
        worst = max(r.points, key=lambda p: p.max_ulp)
        return [f"{label}: largest difference {worst.max_ulp:,} ULP at batch {worst.batch}; "
                "texts that differ: " + ", ".join(
                    f"{p.texts_differ}/{len(p.seeds)} at {p.batch}" for p in r.points)]

    def start(self, fresh: bool = False) -> None:
        self.results.clear()
        for pane in (*self.tables.values(), *self.verdicts.values(), self.cost,
                     self.cost_words):
            pane.object = ""
        self.gpu_box.fetch(self.jobs)
        self.shown = {label: Run(kind, params)
                      for label, (kind, params) in self.default_jobs().items()}
        self.runner.run([(run.kind, run.params, self._handler(label, run))
                         for label, run in self.shown.items()], use_cache=not fresh)

    @param.depends("largest_batch", "new_tokens", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    def _handler(self, label: str, run: Run):
        def on_event(event):
            if event.type == "result":
                run.done(event.result, event)
                self.show(label, event.result, bool(event.cached))
        return on_event

    # ---- results ---------------------------------------------------------------------------
    def show(self, label: str, result: InvarianceResult, cached: bool) -> None:
        self.results[label] = result
        caption = (f"The same prompt alone and in a batch, {label}: {result.prompt_len}-token "
                   f"prompts, {result.new_tokens} new tokens, {len(result.points[0].seeds)} "
                   f"prompts; check: {check_cell(result)}")
        self.tables[label].object = comparison_table(result, caption)
        self.verdicts[label].object = verdict(result, label[0].upper() + label[1:])
        if label == DEFAULT:
            self.prediction_box.reveal(*prediction_outcome(result))
            self.checkpoint.provide("first-move", first_move_question(result))
        if CHUNKED in self.results and INVARIANT_RUN in self.results:
            rows = cost_rows(self.results[CHUNKED], self.results[INVARIANT_RUN])
            self.cost.object = cost_table(rows)
            if rows:
                b, d, i, r = rows[-1]
                self.cost_words.object = (
                    f"At batch {b} a batch-invariant step took **{sig(i)} ms** against "
                    f"**{sig(d)} ms**: **{r:.1f}x** (invariant / default, both medians of the "
                    "measured decode steps).")
        self.say(f"{label[0].upper() + label[1:]} {'from the cache' if cached else 'measured'}"
                 f": largest difference {max(p.max_ulp for p in result.points):,} ULP.")

    # ---- the data, to download ---------------------------------------------------------------
    def download_rows(self) -> list[dict]:
        return [{"run": label, "batch": p.batch, "seed": s.seed, "first_diff": s.first_diff,
                 "max_ulp": s.max_ulp, "max_abs": s.max_abs,
                 "differing_logits": s.differing_logits, "compared_logits": s.compared_logits,
                 "step_ms": p.step_ms}
                for label, r in self.results.items() for p in r.points for s in p.seeds]

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown,
            columns="run (mode and prefill), batch (rows, the prompt included), seed (which "
                    "prompt and company), first_diff (first output token that differs from the "
                    "prompt alone, empty: none), max_ulp and max_abs (largest logit difference, "
                    "in float32 ULP and absolute, over the tokens on the same context), "
                    "differing_logits of compared_logits, step_ms (the batch's median decode "
                    "step)")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.Select.from_param(self.param.largest_batch, sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.new_tokens, step=4, throttled=True,
                                            sizing_mode="stretch_width"),
            self.again, sizing_mode="stretch_width")
        parts = [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls,
                 self.runner.status]
        for label in (DEFAULT, CHUNKED):
            parts += [self.verdicts[label], self.tables[label]]
        parts += [self.download, html_pane(WHY), html_pane(INVARIANT),
                  self.verdicts[INVARIANT_RUN], self.tables[INVARIANT_RUN], self.cost,
                  self.cost_words, html_pane(QUOTE), self.gpu_box]
        return parts
