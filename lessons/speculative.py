"""Lesson 10: Speculative decoding. /app?lesson=speculative

Real runs of the engine's `speculative` job: greedy generation from corpus prompts, plainly and
with a draft proposing k tokens a step that the target verifies in one step (prompt lookup, and
the small draft model shipped in assets/draft). At the reader's batch size: tokens per target
step measured beside the formula (1 - a^(k+1)) / (1 - a) at the measured acceptance a (accepted
/ (accepted + rejections), shown beside the share of guesses kept), and TPOT against plain
decoding. Then plain and prompt lookup at batch 1, 4 and 16: where it stops helping. Each
speculative run's tokens are compared with plain decoding's, and the page says whether they are
the same. The "On a GPU" box gives the batch at which a decode step stops being memory-bound.

URL: k, batch_size: /app?lesson=speculative&k=3&batch_size=1

The lesson's words (prose, questions, instructor notes, quoted sources) are in
lessons/words/speculative.py; this module is its view.
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.gpu_scaling import (
    LLAMA_3_8B,
    Machine,
    bend_batch,
    decode_step,
    step_floor_ms,
)
from engine.calc.stats import Estimate, batch_series_estimate
from engine.lab.results import SpeculativeResult
from widgets.checkpoint import Choice, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import sig, with_interval

from .base import LessonPage
from .data_record import Run, runs_header
from .on_a_gpu import GpuBox, machine_table
from .teaching import Lookup, which_is_larger
from .words.speculative import (
    BATCH_SETUP,
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

PROMPT_LEN, NEW_TOKENS = 48, 64
BATCHES = (1, 4, 16)
METHODS = {"off": "plain decoding", "ngram": "prompt lookup", "draft": "draft model"}


GPU_MODEL = LLAMA_3_8B
GPU_CONTEXTS = (500, 8000)  # tokens cached per sequence: a short chat, a long document


def gpu_finding(machines: list[Machine]) -> str:
    """Lesson 10's finding on each machine: up to which batch a decode step stays memory-bound
    (so speculation's extra rows ride on the weight read), at a short and a long context."""
    def bend(m: Machine, context: int) -> str:
        b = bend_batch(GPU_MODEL, m, context)
        return "none up to 4,096: memory-bound at any batch" if b is None else f"{b:,}"

    table = machine_table(machines, (
        ("batch-1 step (ms), at least", lambda m: sig(step_floor_ms(
            decode_step(GPU_MODEL, 1, GPU_CONTEXTS[0]), m))),
        *((f"smallest batch that is compute-bound, {c:,} tokens cached",
           lambda m, c=c: bend(m, c)) for c in GPU_CONTEXTS),
    ), f"{GPU_MODEL.name} in bf16: where a decode step stops being memory-bound")
    return GPU_TEXT + table


@dataclass(frozen=True)
class Row:
    """One run in figures."""

    name: str
    tpot_ms: float
    over_plain: float
    tokens_per_step: float
    formula: float | None  # (1 - a^(n+1)) / (1 - a) at `alpha`, over the rounds' lengths n
    alpha: float | None  # a: accepted / (accepted + rejections), the formula's input
    kept: float | None  # the share of guesses kept: accepted / proposed
    draft_ms_per_step: float | None
    verify_ms_per_step: float | None
    same_text: bool
    tpot: Estimate | None = None  # TPOT's 95% interval and the gaps it rests on


def tpot_estimate(run: SpeculativeResult) -> Estimate | None:
    """The run's TPOT (the mean token gap of its prompts) with its 95% interval: the batch's
    prompts share every step, so blocks of neighbouring gaps of all of them are resampled
    together (engine.calc.stats.batch_series_estimate); None for a result without its gaps."""
    return batch_series_estimate(run.gaps_ms, None) if run.gaps_ms else None


def run_name(method: str, batch: int) -> str:
    """A run named as the tables name it: 'prompt lookup, batch 4'."""
    return f"{METHODS[method]}, batch {batch}"


def row(run: SpeculativeResult, plain: SpeculativeResult) -> Row:
    steps = max(run.target_steps, 1)
    spec = run.method != "off"
    return Row(name=METHODS[run.method], tpot_ms=run.tpot_ms, over_plain=run.tpot_ms / plain.tpot_ms,
               tokens_per_step=run.tokens_per_step, formula=run.expected_tokens_per_step,
               alpha=run.alpha, kept=run.acceptance_rate,
               draft_ms_per_step=run.draft_ms / steps if spec else None,
               verify_ms_per_step=run.verify_ms / steps if spec else None,
               same_text=run.output_ids == plain.output_ids, tpot=tpot_estimate(run))


def speed_outcome(rows: dict[str, Row]) -> tuple[str, str] | None:
    """Which prediction choice the batch-size runs support (prompt lookup against plain)."""
    if "ngram" not in rows or "off" not in rows:
        return None
    lookup, plain = rows["ngram"], rows["off"]
    choice = which_is_larger(plain.tpot_ms, lookup.tpot_ms, 0.05, (
        "Lower: fewer target steps per token", "Higher: the checks cost more", "About the same"))
    return choice, (f"TPOT {sig(plain.tpot_ms)} ms plain, {sig(lookup.tpot_ms)} ms with prompt "
                    f"lookup, {sig(lookup.tokens_per_step)} tokens per target step")


def drafts_question(rows: dict[str, Row]) -> Question | None:
    """Which draft gave more tokens per target step (the key is the reader's runs)."""
    if "ngram" not in rows or "draft" not in rows:
        return None
    a, b = rows["ngram"].tokens_per_step, rows["draft"].tokens_per_step
    why = (f"Your runs: {sig(a)} tokens per target step with prompt lookup, {sig(b)} with the "
           "draft model.")
    answer = which_is_larger(a, b, 0.05, ("Prompt lookup", "The draft model",
                                          "About the same (within 5%)"))
    return Question("In your runs, which draft gave more tokens per target step?", tuple(
        Choice(text, text == answer, why)
        for text in ("Prompt lookup", "The draft model", "About the same (within 5%)")))


def fraction(a: float | None) -> str:
    """The acceptance a as the formula takes it: 0.62."""
    return "-" if a is None else f"{a:.2f}"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def table_html(rows: dict[str, Row], k: int, batch: int) -> str:
    body = []
    for r in rows.values():
        body.append(
            f'<tr><th scope="row">{r.name}</th><td class="num">{sig(r.tokens_per_step)}</td>'
            f'<td class="num">{sig(r.formula)}</td>'
            f'<td class="num">{fraction(r.alpha)}</td><td class="num">{percent(r.kept)}</td>'
            f'<td class="num">{sig(r.draft_ms_per_step)}</td>'
            f'<td class="num">{sig(r.verify_ms_per_step)}</td>'
            f'<td class="num">{with_interval(r.tpot_ms, r.tpot)}</td>'
            f'<td class="num">{r.over_plain:.2f}x</td>'
            f'<td>{"same" if r.same_text else "DIFFERENT"}</td></tr>')
    heads = ("tokens per target step", "formula at a, over the steps' proposal lengths",
             "a: a guess accepted, the ones before it accepted (the formula's input)",
             "share of guesses kept", "draft per step (ms)", "target step (ms)", "TPOT (ms)", "TPOT against plain",
             "text against plain")
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    return (f'<table class="plain spec-table"><caption>{NEW_TOKENS} tokens for each of {batch} '
            f"prompt{'s' if batch > 1 else ''}, k = {k}; TPOT with its 95% interval "
            f"[low–high] over the {batch * (NEW_TOKENS - 1)} gaps between tokens</caption><thead><tr>"
            f'<th scope="col">decoding</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table>")


def batch_table_html(by_batch: dict[int, dict[str, SpeculativeResult]]) -> str:
    body = []
    for batch in BATCHES:
        runs = by_batch.get(batch, {})
        plain, lookup = runs.get("off"), runs.get("ngram")
        ratio = f"{lookup.tpot_ms / plain.tpot_ms:.2f}x" if plain and lookup else "-"
        body.append(
            f'<tr><th scope="row">{batch}</th>'
            f'<td class="num">{sig(plain.tpot_ms) if plain else "-"}</td>'
            f'<td class="num">{sig(lookup.tpot_ms) if lookup else "-"}</td>'
            f'<td class="num">{sig(lookup.tokens_per_step) if lookup else "-"}</td>'
            f'<td class="num">{ratio}</td></tr>')
    return ('<table class="plain spec-batches"><caption>Plain decoding and prompt lookup as the '
            'batch grows</caption><thead><tr><th scope="col">batch</th>'
            '<th scope="col">TPOT plain (ms)</th><th scope="col">TPOT prompt lookup (ms)</th>'
            '<th scope="col">tokens per target step</th><th scope="col">prompt lookup against '
            f'plain</th></tr></thead><tbody>{"".join(body)}</tbody></table>')


class SpeculativeLesson(LessonPage):
    """Lesson 10: a draft guesses, the target checks k tokens in one step."""

    slug = "speculative"
    job_noun = "runs"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    k = param.Integer(default=4, bounds=(1, 8), label="Guessed tokens per step (k)")
    batch_size = param.Integer(default=1, bounds=(1, 16), label="Batch size (sequences)")

    def __init__(self, **params):
        super().__init__(**params)
        self.by_batch: dict[int, dict[str, SpeculativeResult]] = {}  # batch -> method -> run
        self.shown: dict[str, Run] = {}  # "<method>, batch <b>" -> its run, for the download
        self.download = DataDownload("speculative-runs", self.download_rows,
                                     self.download_header, "Every run in both tables")
        self.table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.batch_table = pn.pane.HTML("", sizing_mode="stretch_width")
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width",
                                        css_classes=["spec-verdict"])
        self.gpu_box = GpuBox(gpu_finding)

    # ---- jobs ------------------------------------------------------------------------------
    def run_params(self, method: str, batch: int) -> dict:
        return {"method": method, "k": self.k, "batch_size": batch, "prompt_len": PROMPT_LEN,
                "new_tokens": NEW_TOKENS}

    def jobs_wanted(self) -> list[tuple[int, str]]:
        """(batch, method): the three ways at the reader's batch size, then plain and prompt
        lookup at each of BATCHES (each run once)."""
        wanted = [(self.batch_size, m) for m in METHODS]
        wanted += [(b, m) for b in BATCHES for m in ("off", "ngram")
                   if (b, m) not in wanted]
        return wanted

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        page = cls()
        return [("speculative", page.run_params(m, b)) for b, m in page.jobs_wanted()]

    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        page, lines = cls(), []
        cached = {m: lookup("speculative", page.run_params(m, page.batch_size)) for m in METHODS}
        if all(cached.values()):
            plain = cached["off"].result
            for c in cached.values():
                r = row(c.result, plain)
                lines.append(f"{r.name}: {sig(r.tokens_per_step)} tokens per target step, TPOT "
                             f"{sig(r.tpot_ms)} ms ({r.over_plain:.2f}x plain), the run took "
                             f"{sig(c.result.duration_ms)} ms")
        return lines

    def start(self) -> None:
        self.gpu_box.fetch(self.jobs)
        self.by_batch.clear()
        self.table.object = self.batch_table.object = self.verdict.object = ""
        self.shown = {run_name(m, b): Run("speculative", self.run_params(m, b))
                      for b, m in self.jobs_wanted()}
        self.runner.run([("speculative", self.run_params(m, b), self._handler(b, m))
                         for b, m in self.jobs_wanted()])

    def _handler(self, batch: int, method: str):
        def on_event(event):
            if event.type != "result":
                return
            self.shown[run_name(method, batch)].done(event.result, event)
            self.by_batch.setdefault(batch, {})[method] = event.result
            self.batch_table.object = batch_table_html(self.by_batch)
            if batch == 1:
                outcome = speed_outcome(self.rows(1))
                if outcome is not None:
                    self.prediction_box.reveal(*outcome)
            if batch == self.batch_size:
                self._show_main()
                self.announce_run(method, bool(event.cached))
        return on_event

    def announce_run(self, method: str, cached: bool) -> None:
        """The status region speaks each run at the reader's batch size, once plain decoding's
        is there to compare with."""
        r = self.rows(self.batch_size).get(method)
        if r is None:
            return
        text = (f"{r.name} at batch {self.batch_size} "
                f"{'from the cache' if cached else 'measured'}: TPOT {sig(r.tpot_ms)} ms")
        if method != "off":
            text += (f", {sig(r.tokens_per_step)} tokens per target step, "
                     f"{r.over_plain:.2f}x plain decoding's TPOT")
        self.say(text[0].upper() + text[1:] + ".")

    @param.depends("k", "batch_size", watch=True)
    def _settings_changed(self) -> None:
        if self.started:
            self.start()

    # ---- results ---------------------------------------------------------------------------
    def rows(self, batch: int) -> dict[str, Row]:
        """The runs at one batch size against plain decoding's ({} until plain has come)."""
        runs = self.by_batch.get(batch, {})
        plain = runs.get("off")
        if plain is None:
            return {}
        return {m: row(runs[m], plain) for m in METHODS if m in runs}

    def _show_main(self) -> None:
        rows = self.rows(self.batch_size)
        if not rows:
            return
        self.table.object = table_html(rows, self.k, self.batch_size)
        question = drafts_question(rows)
        if question is not None:
            self.checkpoint.provide("drafts", question)
        lines = []
        for m, r in rows.items():
            if m == "off":
                continue
            change = ("faster" if r.over_plain < 0.95 else "slower" if r.over_plain > 1.05
                      else "about as fast")
            lines.append(f"- **{r.name}:** {sig(r.tokens_per_step)} tokens per target step "
                         f"(the formula says {sig(r.formula)}); per token **{change}** than "
                         f"plain decoding ({r.over_plain:.2f}x its TPOT); the text is "
                         f"{'the same, token for token' if r.same_text else 'DIFFERENT'}.")
        self.verdict.object = "\n".join(lines)

    def download_rows(self) -> list[dict]:
        """Every run the tables draw from: its figures and their counts (the prompts in the
        batch, the tokens each, the target steps they took, the guesses proposed and kept)."""
        out = []
        for batch in sorted(self.by_batch):
            plain = self.by_batch[batch].get("off")
            for method, run in self.by_batch[batch].items():
                out.append({
                    "decoding": METHODS[method], "batch": batch, "k": run.k,
                    "new_tokens": run.new_tokens, "target_steps": run.target_steps,
                    "tokens_per_step": run.tokens_per_step,
                    "formula_tokens_per_step": run.expected_tokens_per_step,
                    "proposed": run.proposed, "accepted": run.accepted,
                    "alpha": run.alpha, "share_kept": run.acceptance_rate, "tpot_ms": run.tpot_ms,
                    "ttft_ms": run.ttft_ms, "draft_ms": run.draft_ms, "verify_ms": run.verify_ms,
                    "same_text_as_plain": None if plain is None
                    else run.output_ids == plain.output_ids})
        return out

    def download_header(self) -> dict:
        return runs_header(
            self, self.shown or {run_name(m, b): Run("speculative", self.run_params(m, b))
                                 for b, m in self.jobs_wanted()},
            columns="decoding: plain, prompt lookup or the draft model; batch: prompts decoded "
                    "together; k: guesses a step; new_tokens: tokens each prompt generated; "
                    "target_steps: the model's steps they took; tokens_per_step: tokens per "
                    "target step (formula_*: (1 - a^(n+1)) / (1 - a) at alpha, averaged over "
                    "the steps' proposal lengths n); alpha: a, the formula's input, accepted / "
                    "(accepted + rejections); share_kept: accepted / proposed; proposed, "
                    "accepted: the draft's guesses; tpot_ms: mean time "
                    "per output token, ttft_ms: to the first, over the batch's prompts; "
                    "draft_ms, verify_ms: the run's time drafting and checking")

    # ---- the page --------------------------------------------------------------------------
    def body(self) -> list:
        controls = pn.Row(
            pn.widgets.IntSlider.from_param(self.param.k, throttled=True,
                                            sizing_mode="stretch_width"),
            pn.widgets.IntSlider.from_param(self.param.batch_size, throttled=True,
                                            sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, html_pane(SETUP), controls,
                self.runner.status, self.verdict, self.table, html_pane(BATCH_SETUP),
                self.batch_table, self.download, html_pane(QUOTE), self.gpu_box]
