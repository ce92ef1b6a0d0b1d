"""Lesson 10: Speculative decoding. /app?lesson=speculative

Real runs of the engine's `speculative` job: greedy generation from corpus prompts, plainly and
with a draft proposing k tokens a step that the target verifies in one step (prompt lookup, and
the small draft model shipped in assets/draft). At the reader's batch size: tokens per target
step measured beside the formula (1 - a^(k+1)) / (1 - a) at the measured acceptance a, and TPOT
against plain decoding. Then plain and prompt lookup at batch 1, 4 and 16: where it stops
helping. Every speculative run's tokens equal plain decoding's (checked, and said).

URL: k, batch_size: /app?lesson=speculative&k=3&batch_size=1
"""

from __future__ import annotations

from dataclasses import dataclass

import panel as pn
import param

from engine.calc.stats import Estimate, batch_series_estimate
from engine.lab.results import SpeculativeResult
from widgets.checkpoint import Choice, MeasuredQuestion, Question
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.prediction import PredictionQuestion
from widgets.tables import sig, with_interval

from .base import LessonPage
from .data_record import Run, runs_header
from .teaching import InstructorNotes, Lookup, check_takeaway, which_is_larger

PROMPT_LEN, NEW_TOKENS = 48, 64
BATCHES = (1, 4, 16)
METHODS = {"off": "plain decoding", "ngram": "prompt lookup", "draft": "draft model"}

INTRO = """
<p>At small batch sizes a decode step is memory-bound (<a href="app?lesson=roofline">lesson
5</a>): it reads every weight to produce one token per sequence, and the arithmetic units mostly
wait. Checking several tokens in one step costs about as much as checking one.</p>
<p><strong>Speculative decoding</strong> uses that. A cheap <em>draft</em> guesses the next k
tokens; the model (the <em>target</em>) runs one step over its last token and the k guesses,
which gives its own choice after each of them. The guesses it agrees with are kept, plus its own
token at the first disagreement: between 1 and k + 1 tokens for one target step. With greedy
acceptance, as here, the text is exactly what plain decoding writes; only the number of target
steps changes.</p>
<p>Two drafts: <strong>prompt lookup</strong> finds the last few tokens earlier in the text and
proposes what followed them there (no model at all; it shines when the answer repeats the
prompt), and a <strong>draft model</strong>, 0.9 million parameters trained by this repository's
script on the same corpus as the tiny target.</p>
"""

SETUP = """
<h2>The experiment</h2>
<p>The engine generates 64 tokens for each of a batch of 48-token prompts from the corpus,
greedily, three times: plainly, with prompt lookup and with the draft model, both proposing k
tokens a step. If each guess is accepted independently with probability a, a target step yields
on average (1 - a<sup>k+1</sup>) / (1 - a) tokens; the table puts the measured tokens per step
beside that formula at the measured a.</p>
"""

BATCH_SETUP = """
<h2>As the batch grows</h2>
<p>The same generation at batch 1, 4 and 16, plain and with prompt lookup (same k). A bigger
batch already fills the step with useful work, so the k extra rows per sequence are no longer
free, and every rejected guess is work thrown away.</p>
"""

QUOTE = """
<blockquote class="quoted">
<p><strong>Quoted, not measured here.</strong> Speculative decoding was introduced by Leviathan,
Kalman and Matias ("Fast Inference from Transformers via Speculative Decoding", ICML 2023,
arXiv:2211.17192) and by Chen et al. ("Accelerating Large Language Model Decoding with
Speculative Sampling", arXiv:2302.01318, 2023); both accept draft tokens so that the output
distribution equals the target's, also when sampling. The expected number of tokens per target
step, (1 - a<sup>k+1</sup>) / (1 - a), is Leviathan et al.'s. Prompt lookup decoding is Apoorv
Saxena's (github.com/apoorvumang/prompt-lookup-decoding, 2023), available in vLLM as its n-gram
speculator.</p>
<p class="source">Sources: the papers and repository named above.</p>
</blockquote>
"""

OBJECTIVES = (
    "explain how a target can check k guessed tokens in one step and keep its exact output",
    "predict tokens per target step from the acceptance rate with (1 - a^(k+1)) / (1 - a)",
    "say why speculation helps at batch 1 and stops helping as the batch grows",
)

PREDICTION = PredictionQuestion(
    "At batch 1, with prompt lookup guessing 4 tokens a step, the time per output token "
    "compared with plain decoding will be ...",
    ("Lower: fewer target steps per token", "About the same", "Higher: the checks cost more"))

TAKEAWAY = check_takeaway((
    "A memory-bound step can check several guessed tokens for about the price of one, so a "
    "good draft cuts the target steps per token.",
    "Tokens per step follow (1 - a^(k+1)) / (1 - a): the acceptance rate a matters more than "
    "k, and the draft's own time is paid every step.",
    "Use it where steps are memory-bound (small batches, latency first); at large batches the "
    "extra rows are no longer free.",
))

INSTRUCTOR = InstructorNotes(
    minutes=20,
    timing="Three runs at the reader's batch size (plain, prompt lookup, draft model), then "
           "plain and prompt lookup at batch 1, 4 and 16; each run is 64 tokens (how long they "
           "took here is in the numbers below).",
    misconceptions=(
        "\"The draft writes the answer\": the target checks every token; with greedy "
        "acceptance the text is exactly the target's.",
        "\"More guesses are always better\": each extra guess is accepted only if all before "
        "it were, and every guess costs a row of the step.",
        "\"It raises throughput\": it lowers latency when the hardware idles; a full batch "
        "has no idle hardware to spend.",
    ),
    prompts=(
        "Why does prompt lookup do well on code edits and summaries that quote the input?",
        "The draft model here is nearly as good as the target. Why not serve the draft "
        "instead? (Acceptance measures agreement with the target, not quality.)",
        "What would make the draft model pay off on this CPU, where both models are small?",
    ),
)

QUESTIONS = (
    Question("Why can the target check k guessed tokens in about the time of one step?", (
        Choice("The step is memory-bound: extra rows reuse weights it reads anyway", True,
               "The step reads every weight once whatever the rows; while it is memory-bound "
               "the extra rows' arithmetic is nearly free."),
        Choice("The target skips its attention layers for the tokens the draft proposed", False,
               "Every guessed token goes through every layer, attention included; that is what "
               "makes the check exact."),
        Choice("The draft's guesses are already checked by the draft model itself", False,
               "The draft cannot check itself; only the target's own choice decides."))),
    Question("With greedy acceptance, how does the text compare with plain decoding?", (
        Choice("It is the same, token for token: only the number of target steps changes",
               True, "A guess is kept only if it equals the target's own greedy choice there."),
        Choice("It is close, with small differences where the draft model guessed", False,
               "Every kept token is the target's own choice; the draft only saves steps."),
        Choice("It follows the draft's text wherever the draft was confident enough", False,
               "Confidence plays no part: a guess is kept only if it equals the target's."))),
    Question("Each guess is accepted with probability a = 0.5, and k = 4. About how many tokens "
             "does a target step give?", (
        Choice("About 1.9: (1 - 0.5^5) / (1 - 0.5) = 1.94", True,
               "Each extra guess counts only if all before it were accepted: 1 + 0.5 + 0.25 + "
               "0.125 + 0.0625."),
        Choice("About 3: half of the four guesses, plus its own token", False,
               "A guess after a rejected one never counts, so the sum falls off geometrically."),
        Choice("About 2.5: half of the five tokens the step could yield", False,
               "The tokens are accepted in order and stop at the first rejection."))),
    Question("Why does speculation stop helping as the batch grows?", (
        Choice("The step is no longer memory-bound: extra rows cost real time", True,
               "At large batches the arithmetic sets the pace (lesson 4's bend), and rejected "
               "guesses are wasted arithmetic."),
        Choice("The draft's guesses are less often right when many requests run", False,
               "Each sequence's acceptance does not depend on the others in the batch."),
        Choice("Greedy acceptance only works for one sequence at a time", False,
               "Each sequence in the batch is checked on its own rows; it works at any batch."))),
    MeasuredQuestion("drafts", "Once the three runs above have finished, a question on your own "
                               "numbers appears here."),
)


@dataclass(frozen=True)
class Row:
    """One run in figures."""

    name: str
    tpot_ms: float
    over_plain: float
    tokens_per_step: float
    formula: float | None
    acceptance: float | None
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
               acceptance=run.acceptance_rate,
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


def table_html(rows: dict[str, Row], k: int, batch: int) -> str:
    body = []
    for r in rows.values():
        body.append(
            f'<tr><th scope="row">{r.name}</th><td class="num">{sig(r.tokens_per_step)}</td>'
            f'<td class="num">{sig(r.formula)}</td>'
            f'<td class="num">{"-" if r.acceptance is None else f"{100 * r.acceptance:.0f}%"}'
            f'</td><td class="num">{sig(r.draft_ms_per_step)}</td>'
            f'<td class="num">{sig(r.verify_ms_per_step)}</td>'
            f'<td class="num">{with_interval(r.tpot_ms, r.tpot)}</td>'
            f'<td class="num">{r.over_plain:.2f}x</td>'
            f'<td>{"same" if r.same_text else "DIFFERENT"}</td></tr>')
    heads = ("tokens per target step", "formula at the measured a", "guesses accepted",
             "draft per step (ms)", "target step (ms)", "TPOT (ms)", "TPOT against plain",
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
                    "acceptance_rate": run.acceptance_rate, "tpot_ms": run.tpot_ms,
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
                    "target step (formula_*: (1 - a^(k+1)) / (1 - a) at the measured "
                    "acceptance a); proposed, accepted: the draft's guesses; tpot_ms: mean time "
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
                self.batch_table, self.download, html_pane(QUOTE)]
