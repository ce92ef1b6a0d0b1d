"""The course map: every lesson's slug (its URL), number, title, what it measures, and the class
that draws it. The index, the navigation and the router all read this one list.

To add or fill a lesson: write its class (a lessons.base.LessonPage subclass) in the module named
here; the entry's `view` is "module:Class".
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class LessonInfo:
    slug: str  # the lesson's URL: /app?lesson=<slug>
    number: int
    title: str
    measures: str  # one line for the course map: what the engine measures on this page
    view: str  # "lessons.module:ClassName"

    @property
    def url(self) -> str:
        """Relative to the app's route, so it works behind any prefix and inside an iframe."""
        return f"app?lesson={self.slug}"


LESSONS: tuple[LessonInfo, ...] = (
    LessonInfo(
        "two-clocks", 1, "Two clocks: the first token, then the rhythm",
        "How long you wait for the first token, and the gap between the tokens after it, "
        "while the tiny model streams an answer to your prompt.",
        "lessons.two_clocks:TwoClocksLesson"),
    LessonInfo(
        "average-lies", 2, "The average lies",
        "The spread of response times in a real load test: the median, the mean, and the slow "
        "tail (P90, P95, P99) that users remember.",
        "lessons.average_lies:AverageLiesLesson"),
    LessonInfo(
        "three-schedules", 3, "Three ways to batch",
        "One set of requests run under static, dynamic and continuous batching: how long each "
        "request waits, how long it runs, how full the batch stays.",
        "lessons.three_schedules:ThreeSchedulesLesson"),
    LessonInfo(
        "knob", 4, "The batch-size knob",
        "Total tokens per second and each user's time per token at the batch size you choose: "
        "more for everyone, slower for each.",
        "lessons.knob:KnobLesson"),
    LessonInfo(
        "roofline", 5, "Prefill, decode and the memory wall",
        "This machine's memory bandwidth and compute peak, with real prefill passes and decode "
        "steps placed against those two limits.",
        "lessons.roofline:RooflineLesson"),
    LessonInfo(
        "kv-cache", 6, "Where the memory goes: the KV cache",
        "Bytes of cached keys and values per token for each model shape, checked against what "
        "the engine really allocates, and how many requests fit.",
        "lessons.kv_cache:KVCacheLesson"),
    LessonInfo(
        "chunked-prefill", 7, "Chunked prefill",
        "The gaps between tokens of running requests when a long prompt arrives, with its "
        "prefill in one piece or split into chunks.",
        "lessons.chunked_prefill:ChunkedPrefillLesson"),
    LessonInfo(
        "slo-goodput", 8, "Targets, goodput and cost",
        "Throughput, and the requests per second that meet your latency targets, as the request "
        "rate rises; the cost of a million tokens at a price you type.",
        "lessons.slo_goodput:SLOGoodputLesson"),
    LessonInfo(
        "prefix-cache", 9, "Prefix caching: a shared prompt computed once",
        "The time to first token of requests that share a long system prompt, with the "
        "engine's prefix cache off and on, and which KV blocks each request took from it.",
        "lessons.prefix_cache:PrefixCacheLesson"),
    LessonInfo(
        "speculative", 10, "Speculative decoding: guess, then check in one step",
        "Tokens per step of the model and the time per token when a draft (prompt lookup, or a "
        "small trained model) guesses k tokens that the model checks at once, as the batch "
        "grows.",
        "lessons.speculative:SpeculativeLesson"),
    LessonInfo(
        "quantization", 11, "Quantization: fewer bytes per weight",
        "Time per token and bytes read per decode step with this CPU's float32 weights and "
        "int8 weights (a quarter of float32's bytes; half of bf16's, which GPUs serve) at batch "
        "1, 4 and 16, placed on this machine's roofline, and what int8 costs the trained model "
        "in held-out loss and next-token agreement.",
        "lessons.quantization:QuantizationLesson"),
    LessonInfo(
        "capacity", 12, "Planning a deployment: replicas, batch and cost",
        "This machine's batch sizes against your latency targets, the replicas and cost per "
        "million tokens they give for your arrival rate, and a load test at the planned rate "
        "that checks the plan.",
        "lessons.capacity:CapacityLesson"),
    LessonInfo(
        "batch-invariance", 13, "The same prompt, a different answer",
        "One greedy prompt alone and inside batches of up to 64 requests, with and without "
        "chunked prefill: how far its logits move (in units of the last place), where its text "
        "first differs, how often; then the engine's batch-invariant mode and its cost per "
        "step.",
        "lessons.batch_invariance:BatchInvarianceLesson"),
    LessonInfo(
        "experts", 14, "Experts: when a bigger batch reads more weights",
        "The distinct experts a mixture-of-experts model's decode step reads, the weight bytes "
        "that makes and the step time against the batch size, beside a dense model of the "
        "same active size (random weights: timing only).",
        "lessons.experts:ExpertsLesson"),
    LessonInfo(
        "disaggregation", 15, "Prefill here, decode there: disaggregation",
        "One mix of short and long prompts served colocated (whole prompts, then chunked "
        "prefill) and by a prefill worker and a decode worker with the KV handed over: TTFT, "
        "the gap-between-tokens tail and goodput, the disaggregated side live where the engine "
        "has two cores, else computed from costs measured here.",
        "lessons.disaggregation:DisaggregationLesson"),
    LessonInfo(
        "traffic-classes", 16, "Two kinds of traffic, one server",
        "Chat requests beside a batch job of long summaries, served in one queue, in lanes, "
        "and under a flooding tenant with and without a quota: each group's time to first "
        "token and the batch job's tokens per second.",
        "lessons.traffic_classes:TrafficClassesLesson"),
)

_BY_SLUG = {lesson.slug: lesson for lesson in LESSONS}


def lesson_info(slug: str) -> LessonInfo | None:
    return _BY_SLUG.get(slug)


def lesson_class(info: LessonInfo) -> type:
    """Import the lesson's module and return its LessonPage subclass."""
    module, _, name = info.view.partition(":")
    return getattr(importlib.import_module(module), name)


def neighbours(slug: str) -> tuple[LessonInfo | None, LessonInfo | None]:
    """The lessons before and after this one in the course."""
    index = [lesson.slug for lesson in LESSONS].index(slug)
    before = LESSONS[index - 1] if index > 0 else None
    after = LESSONS[index + 1] if index + 1 < len(LESSONS) else None
    return before, after
