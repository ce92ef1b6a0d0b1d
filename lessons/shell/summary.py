"""The course on one printable page (/app?page=summary): each lesson's three-line takeaway and the
tuning checklist. The takeaways are the lessons' own TAKEAWAY constants, so the page and the
lessons never say different things; the print stylesheet (assets/app.css and the template's)
lays it out on one sheet.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from widgets.html import html_pane

from ..registry import LESSONS, lesson_class, lesson_info


@dataclass(frozen=True)
class Step:
    """One item of the tuning checklist, and the lesson that measures it: by slug, so the link
    and its number come from the course map; `number` names a lesson not in the course yet."""

    what: str
    why: str
    lesson: str
    number: int


CHECKLIST: tuple[Step, ...] = (
    Step("Measure a baseline in percentiles",
         "P50, P90 and P99 of TTFT, TPOT and E2E under realistic open-loop load, never the mean "
         "of an empty server.", "average-lies", 2),
    Step("Use continuous batching",
         "Refill a freed slot at the next step; static batches make short answers wait for "
         "long ones.", "three-schedules", 3),
    Step("Pick the batch size for your SLO",
         "The largest batch whose time per token still meets the target buys the most "
         "throughput it allows.", "knob", 4),
    Step("Chunk long prefills",
         "A per-step token budget with decodes first keeps one long prompt from stalling every "
         "stream.", "chunked-prefill", 7),
    Step("Shrink the KV cache: its number format and GQA",
         "The cache, not the weights, caps concurrency: an fp8 cache halves its bytes per "
         "token, grouped-query attention divides them by the group size.", "kv-cache",
         6),
    Step("Window some layers",
         "Hybrid attention keeps only the last W tokens in its sliding-window layers, so at "
         "long contexts the cache tends to half; tokens beyond W reach those layers only "
         "through the full ones.", "kv-cache", 6),
    Step("Cache shared prefixes",
         "A system prompt that every request repeats need be prefilled only once.",
         "prefix-cache", 9),
    Step("Quantize the weights",
         "Fewer bytes per weight lower the decode floor (from a GPU's bf16, int8 or FP8 halve "
         "them, 4-bit quarters them); measure the speed on your kernels and the quality it "
         "costs.",
         "quantization", 11),
    Step("Try speculative decoding",
         "Several tokens per large-model step while the step is memory-bound: small batches, "
         "or long contexts at any batch; the gain fades once the step is compute-bound.",
         "speculative", 10),
    Step("Batch an MoE model more",
         "A batch-1 step reads the active experts; a large batch reads nearly all of them, each "
         "serving only its share of the tokens: an MoE model needs larger batches than a dense "
         "one of its active size to use each byte as well.", "experts", 14),
    Step("Right-size the parallelism",
         "Split a model over GPUs only when it does not fit or is too slow on one; otherwise add "
         "replicas.", "capacity", 12),
    Step("Separate interactive and batch traffic",
         "Chat wants the largest batch whose latency still meets its SLO; overnight work wants "
         "the largest batch that fits and the lowest cost per token. Give each its own "
         "settings, or its own queue.", "slo-goodput", 8),
    Step("Give each kind of traffic a lane and each tenant a quota",
         "A queue per class with a priority and its own limits keeps short chat requests from "
         "waiting behind long batch work; a token bucket per tenant keeps one client from "
         "taking a lane.", "traffic-classes", 16),
    Step("Decide whether outputs must repeat",
         "Batching moves a greedy prompt's logits in the last bits and can flip a near-tie; "
         "where answers must be bit-identical (tests, evaluations, RL), turn on a "
         "batch-invariant mode and pay its cost per step.", "batch-invariance", 13),
    Step("Split prefill and decode when the tail demands it",
         "Workers of their own for each phase end a long prompt's stalls in everyone's "
         "decode, at a KV handover per request; worth it when chunked prefill no longer keeps "
         "the ITL tail and TTFT within their targets.", "disaggregation", 15),
)

INTRO = """
<h1>The course on one page</h1>
<p class="no-print">What each lesson found, in three lines, and the checklist they add up to.
Print it (Ctrl+P, or Cmd+P): it fits one sheet. Every figure behind these lines is measured on
the lesson pages themselves.</p>
"""


def takeaways_html() -> str:
    blocks = []
    for info in LESSONS:
        lines = getattr(lesson_class(info), "takeaway", ())
        if not lines:
            continue
        items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        blocks.append(f'<section class="lesson-summary"><h2>'
                      f'<a href="{info.url}">Lesson {info.number}: {html.escape(info.title)}</a>'
                      f"</h2><ul>{items}</ul></section>")
    return f'<div class="summary-lessons">{"".join(blocks)}</div>'


def checklist_html() -> str:
    items = []
    for step in CHECKLIST:
        info = lesson_info(step.lesson)
        where = (f'<a href="{info.url}">lesson {info.number}</a>' if info
                 else f"lesson {step.number}, coming")
        items.append(f"<li><strong>{html.escape(step.what)}.</strong> {html.escape(step.why)} "
                     f"<span class=\"where\">({where})</span></li>")
    return (f'<section class="checklist"><h2>The tuning checklist</h2>'
            f"<ol>{''.join(items)}</ol></section>")


def summary_content() -> list:
    return [html_pane(f'<div class="course-summary">{INTRO}{takeaways_html()}'
                      f"{checklist_html()}</div>", css_classes=["course-summary"])]
