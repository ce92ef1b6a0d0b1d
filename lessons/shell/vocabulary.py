"""The vocabulary every lesson uses, defined once; pages link here (app?page=vocabulary)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from .template import html_pane


@dataclass(frozen=True)
class Term:
    term: str
    anchor: str
    meaning: str
    measured: str  # how the engine measures it; "" when it is derived or a convention


TERMS: tuple[Term, ...] = (
    Term("TTFT (time to first token)", "ttft",
         "How long a request waits, from the moment it arrives, until its first output token "
         "appears. It covers waiting in the queue and reading the whole prompt (prefill).",
         "Timestamp of the first token minus the arrival time."),
    Term("TPOT (time per output token)", "tpot",
         "The average time for each token after the first: (E2E - TTFT) / (N - 1) for an answer "
         "of N tokens. The first token is left out because it carries the prompt's cost.",
         "Per request, from its N token timestamps."),
    Term("ITL (inter-token latency)", "itl",
         "Every single gap between two tokens of the same answer. TPOT is their average; the "
         "ITLs show the hiccups an average hides.",
         "Every gap, pooled over all requests."),
    Term("E2E (end to end), also TTLT", "e2e",
         "From arrival to the last token: roughly TTFT + (N - 1) x TPOT. It is all a caller "
         "feels when the answer is not streamed, for example a program waiting for a whole JSON "
         "reply.",
         "Timestamp of the last token minus the arrival time."),
    Term("Queue time", "queue",
         "From arrival until the server takes the request into a running batch.",
         "Admission timestamp minus the arrival time."),
    Term("Throughput", "throughput",
         "Output tokens per second produced by the whole server, for everyone together, over "
         "wall-clock time.",
         "All output tokens divided by the run's wall time."),
    Term("Per-user speed", "per-user-speed",
         "How fast one reader sees text appear: 1000 / ITL in milliseconds. An ITL of 10 ms is "
         "100 tokens per second for that reader, whatever the server's total.", ""),
    Term("Goodput", "goodput",
         "Requests per second that met every target (SLO) set for them; the rest count for "
         "nothing, however fast the server was on average.", ""),
    Term("SLO (service-level objective)", "slo",
         "A target written on the tail, such as \"P99 TTFT under 1.2 s\". Choosing it comes "
         "before tuning: a chat lives on TTFT and ITL, an overnight batch job on throughput.", ""),
    Term("P50, P90, P95, P99 (percentiles)", "percentiles",
         "The latency that 50, 90, 95 or 99 percent of requests beat. P50 is the median, the "
         "typical case; P99 is one request in a hundred, the one users remember.",
         "Linear interpolation between the two nearest ranks (the pages say when another rule "
         "is used)."),
    Term("Prefill", "prefill",
         "Reading the prompt: the model processes all its tokens in one pass, which keeps the "
         "processor busy (compute-bound) and sets most of TTFT.", ""),
    Term("Decode", "decode",
         "Writing the answer: one step per new token, each step reading all the model's weights "
         "from memory (memory-bound). Requests sharing a step share that read.", ""),
    Term("KV cache", "kv-cache",
         "The keys and values of every token seen so far, kept so decode need not recompute them. "
         "Its size per token is 2 x layers x KV heads x head size x bytes per number.", ""),
)

NOTES = """
<h2>Two habits of these pages</h2>
<ul>
<li>A request's E2E is the sum of its parts: queue + waiting for a batch to form + prefill +
decode + post-processing + network.</li>
<li>"Tokens per second" can mean the speed one reader sees or the total the server produces;
the pages always say which.</li>
</ul>
"""


def vocabulary_table() -> str:
    rows = "".join(
        f'<tr id="{t.anchor}"><th scope="row">{html.escape(t.term)}</th>'
        f"<td>{html.escape(t.meaning)}</td><td>{html.escape(t.measured) or '&ndash;'}</td></tr>"
        for t in TERMS)
    return (
        '<table class="plain"><caption>Terms used on every page</caption>'
        '<thead><tr><th scope="col">Term</th><th scope="col">What it means</th>'
        f'<th scope="col">How the engine measures it</th></tr></thead><tbody>{rows}</tbody>'
        "</table>")


def vocabulary_content() -> list:
    return [html_pane("<h1>Vocabulary</h1>" + vocabulary_table() + NOTES)]
