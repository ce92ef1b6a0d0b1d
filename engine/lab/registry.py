"""The job registry: every kind of job the engine service runs, declared in one place.

Each kind names its parameters with their types, defaults and limits (engine.lab.params), whether
its results may be served from the measurement cache, its typed result (engine.lab.results), its
body by import path ("module:function"), and its size: "point" (one measured point or a reader's
own text), "run" (a schedule served in real time) or "load" (a load test), which orders the
classroom's queue (engine.lab.job_queue: points first), with the time it takes at most on the
machine class we teach on (`bounds`: seconds at stated params, the largest job a lesson's default
settings start; see BOUNDS_MACHINE and bench/lab/job_bounds.py). So the web process can fill in
defaults, key the cache, order the queue and read results without importing a body (the worker
imports them; bodies import torch).

A body takes (params, emit, cancelled): params are the checked values (see `check`); emit(type,
data) sends an event to whoever submitted the job ("progress", "token", "step", ...);
cancelled() is True once the job was cancelled (a long body polls it and returns None). It
returns its result as a JSON-ready dict, the shape of its result record. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import EXPERT_PRESETS, POLICIES, PRESETS, WEIGHT_FORMATS, WORKLOADS
from ..errors import ConfigError
from . import results
from .job_queue import SIZES
from .params import Bool, Choice, Float, Int, Lengths, Many, Optional, Param, Rate, Text, check_all

Emit = Callable[[str, dict], None]  # a body's emit(type, data)
Cancelled = Callable[[], bool]  # a plain "is it cancelled?" (a Control is one too)
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "torch", "cpp", "triton")
# What each kind's bounds were measured on (bench/lab/job_bounds.py prints the times against them).
BOUNDS_MACHINE = "2 CPU cores (x86-64), no GPU; the worker's engine already built"


@dataclass(frozen=True)
class Bound:
    """A stated time bound: a job of these params takes at most `seconds` on BOUNDS_MACHINE;
    `what` names the lesson's job it stands for (the largest one its default settings start)."""

    seconds: float
    at: dict
    what: str


@dataclass(frozen=True)
class JobSpec:
    """A job kind: its parameters, its body's import path, whether its results may be cached,
    its result record, a line saying what it does, and whether it times anything (a timed job
    gets a disturbance check, engine.lab.quality; a disturbed result of a cacheable kind is
    measured again)."""

    kind: str
    body: str  # "module:function", imported by the worker only
    params: dict[str, Param] = field(default_factory=dict)
    result: type[results.Record] = results.Record
    cacheable: bool = True
    doc: str = ""
    size: str = "point"  # "point" | "run" | "load": the queue runs smaller sizes first
    bounds: tuple[Bound, ...] = ()  # how long it takes at most, at the lessons' settings
    pausable: bool = False  # the queue may pause it between two steps for shorter jobs
    # (engine.lab.policy), outside what it times: the kinds served in real time by
    # engine.serve.loop (its clock leaves a pause out), and sweep and prefill points (each step
    # or pass timed alone; paused only when run-sized: the small preset's on a CPU)
    timed: bool = True  # it times something: its result carries a spread and a disturbance check
    prepare: str = ""  # "module:function" giving what it builds besides its engine, in steps
    # (engine.lab.worker.prepare_more): (what, steps) or None
    figures: bool = False  # it shows a partial figure soon after it starts (a "so_far" progress
    # event, once its first request is answered): a newcomer's first job of this kind is wanted
    # only until then, so it may start where nothing could pause it (engine.lab.policy)
    added: tuple[str, ...] = ()  # parameters added after results were cached: left out of the
    # normalized params (the cache key) while at their default, so those results keep answering

    def __post_init__(self):
        if self.size not in SIZES:
            raise ValueError(f"{self.kind}: size must be one of {', '.join(SIZES)}")

    def size_for(self, params: dict, device: str = "") -> str:
        """The size a job of these (normalized) params queues as: the kind's, one larger for a
        point of a preset bigger than tiny on a CPU (the small preset's points take 5-40 s
        there, the time of a schedule run), unless its estimated time (point_seconds) is a
        point's: the knob's mini points take about a second, and queued as runs a class's
        released points waited behind every schedule run."""
        if (self.size == "point" and params.get("preset", "tiny") != "tiny"
                and not device.startswith("cuda")):
            seconds = point_seconds(self.kind, params)
            return "point" if seconds is not None and seconds <= POINT_S else "run"
        return self.size

    @property
    def defaults(self) -> dict[str, Any]:
        return {name: p.default for name, p in self.params.items()}

    def normalize(self, params: dict | None) -> dict:
        """The params with the defaults filled in, so that {} and the explicit defaults share one
        cache entry; an unknown parameter is refused (a typo must not silently use a default).
        Values are left as given: the cache key is built from exactly these."""
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            allowed = ", ".join(sorted(self.params)) or "none"
            raise ValueError(f"{self.kind}: unknown parameter {unknown[0]!r} (allowed: {allowed})")
        full = {**self.defaults, **params}
        return {k: v for k, v in full.items()
                if k not in self.added or v != self.params[k].default}

    def check(self, params: dict) -> dict:
        """Every parameter checked, in declaration order, as the body receives them; a
        ConfigError names the first one out of its limits."""
        return check_all(self.params, {**self.defaults, **self.normalize(params)})


# A measured point queues as a point on a CPU where point_seconds estimates at most this long:
# the knob's bound (B["knob"]), what a slider's release may cost the class's queue.
POINT_S = 2.0
# One core of the machine class (shared/PERF-NOTES.md: about 185 GFLOP/s on two cores, 20 GB/s
# read with one thread): the worker's, for point_seconds' estimate.
CORE_FLOPS, CORE_BYTES_S = 90e9, 20e9


def point_seconds(kind: str, params: dict) -> float | None:
    """About how long a sweep or prefill point of these params takes on one core of the class:
    its products' FLOPs (2 x parameters per token run) over CORE_FLOPS, plus the weights each
    of its steps reads over CORE_BYTES_S. None for the kinds it does not estimate."""
    cfg = PRESETS.get(params.get("preset", "tiny"))
    if cfg is None:
        return None
    batch, prompt = params.get("batch_size", 1), params.get("prompt_len", 1)
    if kind == "sweep_point":
        steps = params["new_tokens"]
        tokens = (1 if params.get("shared_prompt") else batch) * prompt + batch * (steps - 1)
    elif kind == "prefill_point":
        steps = params["repeats"] + 1
        tokens = batch * prompt * steps
    else:
        return None
    return 2 * cfg.params * tokens / CORE_FLOPS + steps * 4 * cfg.params / CORE_BYTES_S


# ---- the parameters jobs share -------------------------------------------------------------------
ENGINE = {  # which engine runs the job (engine.lab.jobs.engines keeps one per setting)
    "preset": Choice("tiny", choices=tuple(PRESETS)),
    "device": Choice("auto", choices=DEVICES),
    "backend": Choice("auto", choices=BACKENDS),
    "kv_budget_mib": Optional(None, of=Int(lo=1)),
    "random_weights": Bool(False),
}
SEED = {"seed": Int(0, lo=0)}
MAX_BATCH = Int(8, lo=1, hi=256)
LOAD_MIX = {  # the load test's mix of short and long requests (lesson 2)
    "rate": Float(4.0, lo=0.05, hi=1000.0), "requests": Int(40, lo=1, hi=2000),
    "long_share": Float(0.2, lo=0.0, hi=1.0),
    "short_prompt": Lengths([16, 64], hi=1536), "short_output": Lengths([8, 32], hi=512),
    "long_prompt": Lengths([256, 512], hi=1536), "long_output": Lengths([64, 160], hi=512)}
SWEEP = {  # a rate sweep's rates and its workload at each (lesson 8)
    "rates": Many([1.0, 2.0, 4.0, 8.0], each=Float(lo=1e-3, hi=1000.0), each_name="rate",
                  max_items=12, what="request rates"),
    "requests": Int(24, lo=1, hi=10_000), "runs": Int(1, lo=1, hi=5),
    "prompt_len": Lengths([32, 128], single=True),
    "output_len": Lengths([16, 64], single=True)}
ENDPOINT = {  # the teacher's server (engine.lab.endpoint), and how long a run there may take
    "url": Text("", what="the endpoint URL"), "model": Text("", what="the endpoint's model"),
    "timeout_s": Float(600.0, lo=1.0, hi=3600.0)}
SERVE_MAX_BATCH = 256


def _context_less_one(params: dict) -> int:
    return PRESETS[params["preset"]].context - 1


CLASS_RUN = {  # the class run's settings (engine.serve.class_knobs.ClassSettings)
    "policy": Choice("continuous", choices=POLICIES), "max_batch": Int(16, lo=1, hi=256),
    "chunk_size": Int(0, lo=0, hi=2048), "prefix_cache": Bool(False),
    "background_rps": Float(0.0, lo=0.0, hi=50.0), "lanes": Bool(False),
    "max_prompt_tokens": Int(256, lo=1, hi=_context_less_one),
    "max_tokens": Int(64, lo=1, hi=512), "per_student_per_min": Int(20, lo=1, hi=600)}
CLASS_KIND = "class_run"  # the kind whose run makes the engine the class's (class_service)
CLASS_KNOBS = ("policy", "max_batch", "chunk_size", "prefix_cache", "background_rps", "lanes")
LANES_NEED_CONTINUOUS = (
    "Lanes need the continuous policy (a static or dynamic batch has no free slot to give a "
    "student first): choose continuous, or turn lanes off first.")


def check_class_settings(settings: dict) -> None:
    """The class run's settings that cannot go together, refused in one sentence (ConfigError):
    lanes (students before the background load) under a policy other than continuous. The
    service checks a start or a live change with it, and the run itself
    (engine.serve.class_knobs.ClassSettings.validate) again."""
    if settings.get("lanes") is True and settings.get("policy", "continuous") != "continuous":
        raise ConfigError(LANES_NEED_CONTINUOUS)


def _spec(kind: str, body: str, params: dict, result: type[results.Record], doc: str,
          cacheable: bool = True, size: str = "point", bounds: tuple[Bound, ...] = (),
          pausable: bool = False, timed: bool = True, prepare: str = "",
          figures: bool = False, added: tuple[str, ...] = ()) -> JobSpec:
    return JobSpec(kind, body, params, result, cacheable, doc, size, bounds, pausable, timed,
                   prepare, figures, added)


# Seconds each lesson's largest default job takes at most on BOUNDS_MACHINE: about half again
# the slowest time bench/lab/job_bounds.py (and bench/lab/capacity_search.py for the capacity search)
# measured, so a busier machine stays inside; the measurements are in bench/results/.
B = {"info": 5.0, "knob": 2.0, "roofline_decode": 20.0, "roofline_prefill": 15.0,
     "kv_allocation": 0.5, "generate": 1.0, "two_clocks": 1.0, "three_schedules": 5.0,
     "chunked": 8.0, "load_test": 18.0, "block_snapshots": 3.0, "rate_sweep": 20.0,
     "prefix_cache": 15.0, "speculative": 10.0, "capacity_search": 30.0,
     "int8_point": 1.0, "int8_quality": 12.0, "experts_point": 4.0, "traffic_classes": 30.0,
     "invariance": 50.0, "disaggregation": 60.0, "kv_formats": 5.0}



def endpoint_bound(**at: Any) -> Bound:
    """A job sent to the teacher's OpenAI-compatible server takes what that server takes: its
    bound is the client's own limit (600 s, the endpoint jobs' timeout), not a time measured
    here; stated at our own `python -m engine serve` on its default port."""
    return Bound(600.0, {"url": "http://127.0.0.1:8000/v1", "model": "tiny", **at},
                 "a job on the teacher's endpoint: at most its timeout (the endpoint sets the pace)")


JOBS: dict[str, JobSpec] = {s.kind: s for s in (
    # ---- what the machine is -----------------------------------------------------------------
    _spec("info", "engine.lab.jobs.machine:info_job", {"device": Choice("auto", choices=DEVICES)},
          results.InfoResult,
          "The machine: device, threads, presets, measured memory bandwidth and matmul peak.",
          bounds=(Bound(B["info"], {}, "the about page's description (limits measured once per "
                                       "machine, then read from disk)"),),
          timed=False),
    _spec("setup", "engine.lab.jobs.setup:setup_job", {}, results.SetupResult,
          "The engine's first-start set-up: build the C++ kernels, then each lesson preset's "
          "engine, timing its plans where none are on disk (app.py submits it at start-up).",
          cacheable=False, size="load", pausable=True, timed=False),
    # ---- measurements of single steps ---------------------------------------------------------
    _spec("sweep_point", "engine.lab.jobs.measure:sweep_point_job", {
        **ENGINE, "batch_size": Int(1, lo=1, hi=4096), "prompt_len": Int(128, lo=1),
        "new_tokens": Int(32, lo=1), **SEED, "shared_prompt": Bool(False)},
        results.SweepPointResult,
        "One batch size of the sweep: TTFT, median decode step (TPOT), tokens/s, KV bytes.",
        bounds=(Bound(B["knob"], {"preset": "mini", "batch_size": 64, "prompt_len": 16,
                                  "new_tokens": 16, "shared_prompt": True},
                      "a knob point: the knob's largest default (mini)"),
                Bound(B["roofline_decode"], {"preset": "small", "batch_size": 32,
                                             "prompt_len": 128, "new_tokens": 32},
                      "the roofline's largest decode point (small)")),
        pausable=True,  # between two timed steps; only a run-sized one (client)
        added=("shared_prompt",)),
    _spec("prefill_point", "engine.lab.jobs.measure:prefill_point_job", {
        **ENGINE, "prompt_len": Int(128, lo=1, hi=_context_less_one),
        "batch_size": Int(1, lo=1, hi=256), "repeats": Int(3, lo=1, hi=20), **SEED},
        results.PrefillPointResult,
        "Prefill passes of batch_size prompts of prompt_len tokens: median time, FLOPs, bytes.",
        bounds=(Bound(B["roofline_prefill"], {"preset": "small", "prompt_len": 1024},
                      "the roofline's longest prefill (small)"),), pausable=True),
    _spec("kv_allocation", "engine.lab.jobs.measure:kv_allocation_job", {
        "device": Choice("auto", choices=DEVICES), "blocks": Int(4, lo=1, hi=64),
        "block_size": Int(16, lo=1, hi=256)},
        results.KVAllocationResult,
        "Build each preset's paged KV cache (no model) in the engine's dtype, fp16 and fp8, "
        "and report the bytes its tensors really occupy.",
        bounds=(Bound(B["kv_allocation"], {}, "the KV cache lesson's allocations"),),
        timed=False),
    # ---- a reader's own text, streamed (not cached: the point is watching it arrive) -----------
    _spec("generate", "engine.lab.jobs.generation:generate_job", {
        **ENGINE, "prompt": Text("", what="the prompt"), "max_new_tokens": Int(64, lo=1),
        "temperature": Float(0.0, lo=0.0), "top_k": Int(0, lo=0),
        "top_p": Float(1.0, lo=0.0, hi=1.0), **SEED},
        results.GenerateResult,
        "One prompt, streamed: a \"token\" event per token with its text and engine time.",
        cacheable=False, bounds=(Bound(B["generate"], {"prompt": "The KV cache",
                                                       "max_new_tokens": 64},
                                       "a generation of 64 tokens (tiny)"),)),
    _spec("two_clocks", "engine.lab.jobs.generation:two_clocks_job", {
        **ENGINE, "prompt": Text("", what="the prompt", max_chars=4000),
        "context_tokens": Int(0, lo=0, hi=1536), "max_new_tokens": Int(48, lo=2, hi=512),
        "background": Int(0, lo=0, hi=32), "background_prompt_len": Int(32, lo=1, hi=512),
        "arrive_after_ms": Float(300.0, lo=0.0, hi=5000.0), "stream": Bool(True),
        "temperature": Float(0.0, lo=0.0, hi=2.0), **SEED},
        results.TwoClocksResult,
        "The reader's prompt streamed beside N background requests that are already decoding.",
        cacheable=False, bounds=(Bound(B["two_clocks"], {
            "prompt": "The engine reads the whole prompt first, and then", "max_new_tokens": 48},
            "lesson 1's send at its defaults (tiny)"),)),
    # ---- the real-time serving loop ---------------------------------------------------------------
    _spec("serve_run", "engine.lab.jobs.serving:serve_run_job", {
        **ENGINE, "policy": Choice("continuous", choices=POLICIES),
        "workload": Choice("poisson", choices=WORKLOADS), "rate": Rate("inf"),
        "burstiness": Float(1.0, lo=1e-6), "requests": Int(16, lo=1, hi=10_000),
        "concurrency": Int(4, lo=1, hi=1024), "prompt_len": Lengths([32, 128], single=True),
        "output_len": Lengths([16, 64], single=True), "long_prompt_len": Int(1536, lo=1),
        "long_at": Float(0.2, lo=0.0), "max_batch": MAX_BATCH, "timeout_ms": Float(50.0, lo=0.0),
        "chunk_size": Int(128, lo=0), "max_tokens_per_step": Optional(None, of=Int(lo=1)),
        "slo_ttft_ms": Optional(None, of=Float(lo=0.0)),
        "slo_tpot_ms": Optional(None, of=Float(lo=0.0)), **SEED,
        "stream_tokens": Bool(True)},
        results.ServeRunResult,
        "A seeded workload served in real time under a batching policy (`python -m engine run`).",
        size="run", bounds=(
            Bound(B["three_schedules"], {
                "policy": "dynamic", "rate": 10.0, "requests": 16, "prompt_len": [16, 128],
                "output_len": [8, 96], "max_batch": 4, "timeout_ms": 100.0,
                "stream_tokens": False}, "a schedule run: lesson 3's default trace"),
            Bound(B["chunked"], {
                "workload": "interference", "requests": 8, "prompt_len": [64, 64],
                "output_len": [160, 160], "long_prompt_len": 1536, "max_batch": 16,
                "chunk_size": 128, "stream_tokens": False},
                "lesson 7's chunked run at its defaults")),
        pausable=True, figures=True),
    _spec("load_test", "engine.lab.jobs.serving:load_test_job", {
        **ENGINE, **LOAD_MIX, "users": Int(0, lo=0, hi=256),
        "max_batch": MAX_BATCH, "chunk_size": Int(128, lo=0, hi=2048), **SEED},
        results.LoadTestResult,
        "Short and long requests under continuous batching: the tail. Open loop (users 0): "
        "Poisson arrivals at rate; closed loop: `users` concurrent users, each sending again "
        "when answered (rate unused).",
        size="load", bounds=(Bound(B["load_test"], {}, "lesson 2's load test at its defaults"),),
        pausable=True, figures=True),
    # ---- an OpenAI-compatible server the teacher configured (engine.lab.endpoint) ------------
    _spec("endpoint_load_test", "engine.lab.jobs.endpoint:endpoint_load_test_job", {
        **ENDPOINT,
        **LOAD_MIX,
        **SEED},
        results.EndpointLoadTestResult,
        "The load test's mix sent over HTTP to an OpenAI-compatible server, timed at the client "
        "(not cached: the server can change between runs).",
        cacheable=False, size="load", bounds=(endpoint_bound(),)),
    _spec("endpoint_rate_sweep", "engine.lab.jobs.endpoint:endpoint_rate_sweep_job", {
        **ENDPOINT,
        **SWEEP, **SEED},
        results.EndpointRateSweepResult,
        "The rate sweep's workload sent over HTTP to an OpenAI-compatible server at each rate, "
        "timed at the client (not cached).",
        cacheable=False, size="load", bounds=(endpoint_bound(),)),
    _spec("endpoint_concurrency", "engine.lab.jobs.endpoint:endpoint_concurrency_job", {
        **ENDPOINT, "concurrency": Int(8, lo=1, hi=256), "prompt_len": Int(64, lo=1, hi=4096),
        "new_tokens": Int(32, lo=2, hi=1024), **SEED},
        results.EndpointConcurrencyResult,
        "N clients streaming at once from an OpenAI-compatible server (lesson 4's knob there), "
        "timed at the client (not cached).",
        cacheable=False, size="point", bounds=(endpoint_bound(),)),
    _spec("endpoint_stream", "engine.lab.jobs.endpoint:endpoint_stream_job", {
        **ENDPOINT, "prompt": Text("", what="the prompt", max_chars=4000),
        "max_new_tokens": Int(48, lo=2, hi=512), "background": Int(0, lo=0, hi=32),
        "background_prompt_len": Int(32, lo=1, hi=512),
        "arrive_after_ms": Float(300.0, lo=0.0, hi=5000.0), **SEED},
        results.EndpointStreamResult,
        "The reader's prompt streamed from an OpenAI-compatible server beside N background "
        "requests, timed at the client (lesson 1 there; not cached).",
        cacheable=False, size="point", bounds=(endpoint_bound(prompt="Why is the sky blue?"),)),
    _spec("block_snapshots", "engine.lab.jobs.serving:block_snapshots_job", {
        **ENGINE, "kv_budget_mib": Int(2, lo=1, hi=64), "requests": Int(10, lo=1, hi=10_000),
        "rate": Rate(6.0), "prompt_len": Lengths([16, 80], single=True),
        "output_len": Lengths([8, 48], single=True), "max_batch": Int(4, lo=1, hi=256),
        "chunk_size": Int(64, lo=0), **SEED},
        results.BlockSnapshotsResult,
        "A small Poisson workload served for real, with every step's block tables recorded.",
        size="run", bounds=(Bound(B["block_snapshots"], {}, "the KV cache lesson's run"),),
        pausable=True),
    # ---- the serving techniques, each measured against the engine without it ------------------
    _spec("prefix_cache", "engine.lab.jobs.techniques:prefix_cache_job", {
        **ENGINE, "prefix_cache": Bool(True), "shared_prefix_len": Int(1024, lo=0, hi=1536),
        "requests": Int(5, lo=1, hi=32), "prompt_len": Lengths([32, 64], hi=256),
        "output_len": Int(4, lo=1, hi=64), **SEED},
        results.PrefixCacheResult,
        "Requests sharing a system prompt of shared_prefix_len tokens, served one at a time "
        "from a cold start, the prefix cache on or off: each request's TTFT and cached tokens.",
        size="run", bounds=(Bound(B["prefix_cache"], {"prefix_cache": False},
                                  "the prefix cache lesson's run at its defaults, cache off"),)),
    _spec("speculative", "engine.lab.jobs.techniques:speculative_job", {
        **ENGINE, "method": Choice("ngram", choices=("off", "ngram", "draft")),
        "k": Int(4, lo=1, hi=8), "batch_size": Int(1, lo=1, hi=16),
        "prompt_len": Int(48, lo=1, hi=512), "new_tokens": Int(64, lo=2, hi=256), **SEED},
        results.SpeculativeResult,
        "Greedy generation for batch_size corpus prompts, plainly (method off) or with a draft "
        "proposing k tokens a step: TPOT, target steps, acceptance against the formula.",
        size="run", bounds=(Bound(B["speculative"], {},
                                  "a generation of 64 tokens with prompt lookup (tiny)"),),
        prepare="engine.lab.jobs.techniques:draft_steps"),
    _spec("int8_point", "engine.lab.jobs.quantization:int8_point_job", {
        **ENGINE, "weight_format": Choice("int8", choices=WEIGHT_FORMATS),
        "batch_size": Int(1, lo=1, hi=256), "prompt_len": Int(128, lo=1),
        "new_tokens": Int(32, lo=1), **SEED},
        results.Int8PointResult,
        "sweep_point on an engine with fp32 or int8 weights (CPU; int8 needs python -m engine "
        "build-kernel): TPOT, weight bytes, bytes per step.",
        bounds=(Bound(B["int8_point"], {"batch_size": 16, "prompt_len": 128, "new_tokens": 32},
                      "a point of the int8 sweep at batch 16 (tiny)"),)),
    _spec("int8_quality", "engine.lab.jobs.quantization:int8_quality_job", {
        "preset": Choice("tiny", choices=("tiny",)), "windows": Int(16, lo=1, hi=58),
        "seq_len": Int(256, lo=16, hi=256)},
        results.Int8QualityResult,
        "The trained tiny model with fp32 and int8 weights on the corpus's held-out windows: "
        "loss of each, and the share of positions where both pick the same next token.",
        bounds=(Bound(B["int8_quality"], {}, "both models on 16 held-out windows (tiny)"),)),
    _spec("kv_formats", "engine.lab.jobs.kv_formats:kv_formats_job", {
        "device": Choice("auto", choices=DEVICES), "budget_mib": Int(64, lo=1, hi=4096),
        "batch_size": Int(8, lo=1, hi=64), "prompt_len": Int(128, lo=1, hi=1536),
        "new_tokens": Int(24, lo=8, hi=256), "windows": Int(4, lo=1, hi=58),
        "contexts": Many([256, 512, 1024, 2048], each=Int(lo=2, hi=2048),
                         each_name="context length", max_items=8, what="context lengths"),
        "hybrid_prompt": Int(128, lo=1, hi=2048), "chunk_size": Int(256, lo=1, hi=2048),
        **SEED},
        results.KVFormatsResult,
        "Lesson 6's formats: fp8 against the float cache on tiny (blocks a budget holds, "
        "requests that fit, decode step, held-out loss, top-1 agreement, largest logit "
        "difference) and tiny-hybrid against full attention (blocks the allocator holds at "
        "each context length, bytes, requests that fit).",
        bounds=(Bound(B["kv_formats"], {}, "the KV cache lesson's formats (tiny)"),)),
    _spec("experts_point", "engine.lab.jobs.experts:experts_point_job", {
        **ENGINE, "preset": Choice("moe-mini", choices=tuple(EXPERT_PRESETS)),
        "batch_size": Int(1, lo=1, hi=256), "prompt_len": Int(64, lo=1),
        "new_tokens": Int(16, lo=1), **SEED},
        results.ExpertsPointResult,
        "sweep_point on a mixture-of-experts preset or its dense twin: TPOT, and the distinct "
        "experts each decode step read, a uniform router's expectation, the weight bytes read.",
        bounds=(Bound(B["experts_point"], {"batch_size": 64},
                      "the experts lesson's largest point (moe-mini, batch 64)"),)),
    _spec("invariance", "engine.lab.jobs.invariance:invariance_job", {
        **ENGINE, "batch_sizes": Many([1, 2, 8, 32, 64], each=Int(lo=1, hi=65),
                                      each_name="batch size", max_items=8, what="batch sizes"),
        "seeds": Int(4, lo=1, hi=16), "prompt_len": Int(48, lo=1, hi=512),
        "new_tokens": Int(32, lo=1, hi=128), "chunk": Int(0, lo=0, hi=512),
        "batch_invariant": Bool(False), **SEED},
        results.InvarianceResult,
        "One greedy prompt alone and inside batches of batch_sizes rows (chunk > 0: its "
        "prefill in chunks beside the others' decode rows), seeds prompts each: where the text "
        "first differs, the largest logit difference (ULP, absolute), each batch's decode step; "
        "a \"step\" event with each batch size as it is done.",
        size="run", bounds=(Bound(B["invariance"], {"batch_invariant": True, "chunk": 16, "seeds": 1},
                                  "the batch-invariance lesson's invariant run (tiny)"),)),
    _spec("disaggregation", "engine.lab.jobs.disaggregation:disaggregation_job", {
        **ENGINE, "rate": Float(2.0, lo=0.05, hi=1000.0), "requests": Int(16, lo=1, hi=500),
        "long_share": Float(0.25, lo=0.0, hi=1.0),
        "short_prompt": Lengths([16, 64], hi=1536), "short_output": Lengths([16, 32], hi=512),
        "long_prompt": Lengths([512, 768], hi=1536), "long_output": Lengths([16, 32], hi=512),
        "max_batch": MAX_BATCH, "chunk_size": Int(64, lo=1, hi=2048),
        "slo_ttft_ms": Float(1000.0, lo=1.0, hi=600_000.0),
        "slo_tpot_ms": Float(100.0, lo=0.1, hi=60_000.0),
        "mode": Choice("auto", choices=("auto", "live", "replay")), **SEED},
        results.DisaggregationResult,
        "One mix of short and long prompts served colocated (whole prompts, then chunked "
        "prefill, live) and disaggregated (a prefill worker and a decode worker: live where the "
        "engine has two cores, else replayed on step costs and handovers measured here): TTFT, "
        "the ITL tail, goodput, each request's handover.", size="load",
        bounds=(Bound(B["disaggregation"], {}, "lesson 15's three runs at its defaults"),),
        pausable=True),
    _spec("rate_sweep", "engine.lab.jobs.serving:rate_sweep_job", {
        **ENGINE, **SWEEP, "max_batch": MAX_BATCH,
        "chunk_size": Int(128, lo=0), **SEED},
        results.RateSweepResult,
        "The same Poisson workloads (`runs` seeds: each rate run that many times, each run "
        "other requests at other moments) served at each rate in turn; a \"step\" event with "
        "each run's point as it finishes.", size="load",
        bounds=(Bound(B["rate_sweep"], {"rates": [8.0, 16.0, 32.0, 64.0, 128.0],
                                        "requests": 16, "runs": 3, "max_batch": 32},
                      "lesson 8's sweep at its defaults"),), pausable=True,
        figures=True),
    _spec("capacity_search", "engine.lab.jobs.capacity:capacity_search_job", {
        **ENGINE, "ttft_p95_ms": Float(1000.0, lo=1.0, hi=600_000.0),
        "per_user_tok_s": Float(20.0, lo=0.0, hi=100_000.0), "max_users": Int(32, lo=1, hi=256),
        "repeats": Int(3, lo=1, hi=5), "requests_per_user": Int(2, lo=1, hi=8),
        "per_doubling": Int(4, lo=1, hi=64),
        "prompt_len": Lengths([32, 128], single=True), "output_len": Lengths([16, 64], single=True),
        "max_batch": MAX_BATCH, "chunk_size": Int(128, lo=0), **SEED},
        results.CapacitySearchResult,
        "Closed-loop load (N users, each sending again when answered): the most users whose "
        "P95 TTFT and tokens/s each meet the targets, by doubling then bisection on a grid of "
        "per_doubling loads a doubling, a load tried again (up to repeats) while its interval "
        "straddles a target; a \"step\" event with each load as it is judged.", size="load",
        bounds=(Bound(B["capacity_search"], {}, "lesson 8's capacity search at its defaults"),)),
    _spec("traffic_classes", "engine.lab.jobs.traffic:traffic_classes_job", {
        **ENGINE, "chat_requests": Int(16, lo=1, hi=500), "chat_rate": Float(5.0, lo=0.05, hi=100.0),
        "chat_prompt": Lengths([16, 48], hi=512), "chat_output": Lengths([8, 16], hi=256),
        "users": Int(4, lo=1, hi=64), "batch_requests": Int(4, lo=0, hi=64),
        "batch_prompt": Lengths([384, 512], hi=1536), "batch_output": Lengths([24, 40], hi=256),
        "flood_requests": Int(16, lo=0, hi=500), "flood_rate": Float(10.0, lo=0.05, hi=200.0),
        "max_prompt": Int(256, lo=1, hi=2047), "batch_max_running": Int(2, lo=1, hi=256),
        "tenant_rate": Float(150.0, lo=1.0, hi=1e6), "tenant_burst": Float(400.0, lo=1.0, hi=1e7),
        "max_batch": Int(4, lo=1, hi=256), "chunk_size": Int(128, lo=0, hi=2048), **SEED},
        results.TrafficClassesResult,
        "Chat requests beside a batch job of long summaries, served four ways in turn: one FIFO "
        "queue, an interactive lane over a batch lane, the lanes under a flooding tenant, and "
        "the same with a token bucket per tenant (lesson 16).", size="load",
        bounds=(Bound(B["traffic_classes"], {}, "lesson 16's four runs at their defaults"),),
        pausable=True),    # ---- the class as the load (engine.lab.class_service): as long as the teacher keeps it ----
    _spec(CLASS_KIND, "engine.lab.jobs.classroom:class_run_job", {
        **ENGINE, **CLASS_RUN, **SEED},
        results.ClassRunResult,
        "The class run: one live engine run that the students' requests join (class_send), "
        "its knobs changed live (class_set), until the teacher stops it; a \"class\" event per "
        "turn of its loop with what happened.", cacheable=False, size="load", timed=False),
)}


def get_spec(kind: str) -> JobSpec:
    """The spec of a kind; a ValueError naming the known kinds otherwise."""
    try:
        return JOBS[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}: choose one of {', '.join(sorted(JOBS))}") \
            from None


def normalize(kind: str, params: dict | None) -> dict:
    """A kind's params with its defaults filled in (see JobSpec.normalize)."""
    return get_spec(kind).normalize(params)
