"""The engines a worker keeps, so that the next sweep point does not reload the model, and the
size of their KV pools.

A pool is sized to what the job at hand holds at once (`fit_kv`), not to a fixed share of memory:
the engine's own default (a quarter of free RAM up to 1 GiB on CPU) made the worker hold 1.4 GB
for the tiny model whose lessons need a few MiB. An engine the job did not give an explicit
`kv_budget_mib` starts with room for one full-context sequence; a job that needs more grows the
pool (to the next power of two of blocks, never past the engine's default budget, where a job too
big is refused with the engine's own message), and a job needing a quarter of it or less shrinks
it again, so an idle worker holds little. Resizing happens before a job's timed steps, and the
engine warms up again after it.

Engines that differ only in their pool (a KV budget of their own, as the KV cache lesson's
block_snapshots asks; prefix caching) share one model: a sibling has the same weights (read
only) with a pool, block manager and runner of its own, made in milliseconds, and the models
kept are bounded by what they hold together (MAX_MODEL_BYTES), each counted once. A paused job's
engine (engine.lab.worker.pause) is shared too: it is set aside, since its requests hold KV
blocks, and the jobs run inside the pause get a sibling. Building the model again for each
would evict and rebuild models in turn: a class uses tiny, tiny with block_snapshots' 2 MiB
budget and the roofline's small, three engines for two models, and nested pauses more.

What a class builds shows in a traced run (`bench/lab/engine_gaps.py` reads the "built", "sibling",
"resize" and "evict" marks; each build is also a line in the server's log): each model once, a
sibling or a pool resize in milliseconds. A plan not on disk is what costs (tens of seconds for
small), hence the app's set-up job at its first start (engine.lab.jobs.setup) and `python -m
engine tune`.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import time
import weakref
from collections.abc import Callable, Iterable

from ...config import EngineConfig, get_preset
from ...device import resolve_device, torch_dtype
from ...llm_engine import LLMEngine
from ...model.kv_cache import default_budget
from ...model.matmul_plan import plain_plans_untimed
from ...scheduler import kv_tokens_needed
from ...steps import Steps
from .. import trace
from ..setup_state import SETUP_ENV, read_state

log = logging.getLogger(__name__)
# The models kept (their engines, and siblings sharing them, engine_for) hold at most this many
# bytes of tensors together (LlamaModel.held_bytes; the most recently used one is always kept).
# A bound by count would build a model again at every turn whenever three are used in turns (the
# quantization lesson's small in fp32 and int8 beside the knob's tiny); by bytes, the lessons'
# models fit together (a preset's parameters in float32: ModelConfig.params x 4 bytes, and its
# buffers; small is about 0.5 GB in float32).
MAX_MODEL_BYTES = 2**30
MAX_PAUSED_BUILDS = 2  # half-made builds kept (build)
SHRINK_AT = 4  # a pool this many times larger than a job needs is shrunk to fit it
_engines: dict[tuple, LLMEngine] = {}
_fitted: weakref.WeakSet[LLMEngine] = weakref.WeakSet()  # engines whose pool follows the jobs
_paused: dict[tuple, Steps[LLMEngine]] = {}  # builds stopped between two steps, to go on later
_spares: dict[tuple, LLMEngine] = {}  # built for the jobs run inside a paused one (set_aside)
_aside: dict[tuple, list[LLMEngine]] = {}  # engines of paused jobs, the innermost pause last
_timings: dict[tuple, list[tuple[str, float]]] = {}  # each build's steps so far (seconds)
_held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its held_bytes


def engine_for(preset: str, device: str = "auto", backend: str = "auto",
               kv_budget_mib: int | None = None, random_weights: bool = False,
               weight_format: str = "fp32", prefix_caching: bool = False) -> LLMEngine:
    """The worker's engine for these settings, built on first use and kept (those of the
    most recently used models that hold MAX_MODEL_BYTES together; a key differing only in its KV budget or prefix
    caching gets a sibling sharing the model, engines.sibling), warmed up so no first-call cost lands in a measurement. Prefix caching is
    off, and the weights float, except for the jobs of the lessons that teach them, which ask
    for an engine of their own."""
    key = (preset, device, backend, kv_budget_mib, random_weights, weight_format, prefix_caching)
    engine = build(key)
    assert engine is not None  # nothing can pause it
    return engine


def engine_from_params(params: dict) -> LLMEngine:
    """The engine a job's checked parameters ask for (registry.ENGINE's names, and the weight
    format and prefix cache where the kind has them)."""
    return engine_for(*engine_key(params))


def engine_key(params: dict) -> tuple:
    """engine_for's settings for a job's checked parameters, as the key it keeps engines by."""
    return (params["preset"], params["device"], params["backend"], params["kv_budget_mib"],
            params["random_weights"], params.get("weight_format", "fp32"),
            params.get("prefix_cache", False))


def build(key: tuple, cancelled: Callable[[], bool] | None = None,
          on_step: Callable[[str], None] | None = None) -> LLMEngine | None:
    """The engine for engine_for's key: the kept one, a sibling of an engine with the same
    model (made at once), or built now, in steps (engine.steps). After each step on_step(what
    is done) is called, then cancelled(): when that is True the build stops there and None is
    returned; the half-built engine is kept (the most recent MAX_PAUSED_BUILDS) and the next
    build of that key goes on where this one stopped, so a build paused for other readers'
    jobs loses nothing."""
    plain_plans_untimed(kernels_expected())
    engine = _engines.pop(key, None)
    if engine is None:
        twin = _with_model_of(key)
        if twin is not None:
            engine = sibling(twin, key)
    if engine is None:
        steps = _paused.pop(key, None)
        if steps is None:
            _evict(room=_estimated_bytes(key))  # the least recently used go before the build
            steps = _engine_steps(key)
            _timings[key] = []
        timings = _timings.setdefault(key, [])
        started = time.monotonic()
        while True:
            try:
                what = next(steps)
            except StopIteration as done:
                engine = done.value
                timings.append(("warm-up", time.monotonic() - started))
                break
            now = time.monotonic()
            timings.append((what, now - started))
            trace.mark("build step", key=list(key), step=what, s=now - started)
            started = now
            if on_step is not None:
                on_step(what)
            if cancelled is not None and cancelled():
                _paused[key] = steps
                while len(_paused) > MAX_PAUSED_BUILDS:
                    gone = next(iter(_paused))
                    _paused.pop(gone)  # the oldest paused build is given up
                    _timings.pop(gone, None)
                    log.info("giving up the paused build of %s", describe(gone))
                return None
            started = time.monotonic()
        _note_built(key, _timings.pop(key, timings))
    _engines[key] = engine  # most recently used last
    _evict()
    return engine


def kernels_expected() -> bool:
    """Whether the app's set-up job is yet to build the C++ kernels on this machine (it runs
    unless $LLM_SPEED_SETUP is "0", and its state on disk does not say how the kernels stand):
    meanwhile a plain-path model's plan is not timed (matmul_plan.plain_plans_untimed), since
    its engine is dropped once they are built (drop_plain_engines)."""
    return os.environ.get(SETUP_ENV, "1") != "0" and read_state().kernels == "unknown"


def drop_plain_engines() -> None:
    """Forget the engines, and the half-made builds, that asked for the "auto" backend and got
    another than "auto" gives now: the C++ kernels built since (the set-up job), their next job
    builds again on the fast path. Paused jobs' engines stay with their jobs."""
    from ...llm_engine import default_backend

    for key, engine in list(_engines.items()) + list(_spares.items()):
        if key[2] == "auto" and engine.backend != default_backend(engine.device, engine.dtype):
            _engines.pop(key, None)
            _spares.pop(key, None)
            log.info("dropped the %s engine built before the kernels", describe(key))
    for key in [k for k in _paused if k[2] == "auto"]:
        _paused.pop(key)
        _timings.pop(key, None)


def model_key(key: tuple) -> tuple:
    """The part of an engine key that makes its model (the KV budget and the prefix cache are
    the pool's: engines differing only in them share one model)."""
    preset, device, backend, _, random_weights, weight_format, _ = key
    return preset, device, backend, random_weights, weight_format


def _with_model_of(key: tuple) -> LLMEngine | None:
    """A kept engine, or a paused job's, whose model is the one key asks for."""
    wanted = model_key(key)
    kept = [e for k, e in _engines.items() if model_key(k) == wanted]
    held = [e for k, held in _aside.items() if model_key(k) == wanted for e in held]
    return next(iter(kept + held), None)


def _evict(room: int = 0) -> None:
    """Keep the engines of the most recently used models whose tensors, with `room` bytes more
    (a model about to be built), fit in MAX_MODEL_BYTES; without room the most recently used
    model stays whatever it holds. An engine sharing its model with a kept one costs only its
    pool (sized to its jobs), so it does not count again."""
    while True:
        held: dict[tuple, int] = {}  # model key -> bytes, the least recently used first
        for k, engine in _engines.items():
            held.pop(model_key(k), None)
            held[model_key(k)] = held_bytes(engine)
        if not held or sum(held.values()) + room <= MAX_MODEL_BYTES or (
                len(held) == 1 and not room):
            return
        oldest = next(iter(held))
        for k in [k for k in _engines if model_key(k) == oldest]:
            del _engines[k]
        log.info("dropped the %s model (%.0f MiB; the models kept hold at most %.0f MiB)",
                 describe(oldest), held[oldest] / 2**20, MAX_MODEL_BYTES / 2**20)
        trace.mark("evict", key=list(oldest))


def held_bytes(engine: LLMEngine) -> int:
    """The bytes of the engine's model's tensors (counted once per model)."""
    model = engine.model
    if model not in _held:
        _held[model] = model.held_bytes()
    return _held[model]


def _estimated_bytes(key: tuple) -> int:
    """What the key's model will hold, before it is built: its parameters in the engine's
    dtype (an int8 model holds less)."""
    cfg = get_preset(key[0])
    return cfg.params * torch_dtype(cfg.dtype_name(resolve_device(key[1]))).itemsize


def path_of(key: tuple) -> str | None:
    """The path ("fast" or "plain", LLMEngine.path) of the key's engine, or of one with its
    model (a sibling runs the same model the same way); None where none is kept."""
    engine = _engines.get(key) or _with_model_of(key)
    return None if engine is None else engine.path


def is_built(key: tuple) -> bool:
    """True if the worker keeps an engine for this key, or one with its model (a sibling is
    made at once): building it would take no time."""
    return key in _engines or _with_model_of(key) is not None


def sibling(engine: LLMEngine, key: tuple) -> LLMEngine:
    """An engine for `key` sharing `engine`'s model (its weights are only read) with a KV pool,
    block manager and runner of its own: for a job run while `engine`'s is paused holding
    blocks, or for a key asking for the same model with another KV budget or prefix caching.
    Its pool is the key's explicit budget, else one full context that follows the jobs as
    fitted engines' do; warmed up, so a new pool's first-touch costs stay out of a
    measurement."""
    started = time.monotonic()
    kv_budget_mib, prefix_caching = key[3], key[6]
    twin = copy.copy(engine)
    for name in [n for n in vars(twin) if hasattr(type(twin), n)]:
        del twin.__dict__[name]  # a job's wrapper of a method (serving.record_block_tables
        # wraps engine.step) belongs to that job and calls into `engine`'s own pool
    twin.config = copy.copy(engine.config)
    twin.config.prefix_caching = prefix_caching
    twin.config.kv_budget_bytes = (kv_budget_mib * 2**20 if kv_budget_mib else
                                   smallest_pool_bytes(engine.config.preset, engine.device))
    if not kv_budget_mib:
        _fitted.add(twin)
    twin._build_kv_cache(twin.config.kv_budget_bytes)
    twin._ids = itertools.count()
    twin.warm_up()
    seconds = time.monotonic() - started
    log.info("made a sibling engine %s in %.2f s", describe(key), seconds)
    trace.mark("sibling", key=list(key), s=seconds)
    return twin


def set_aside(key: tuple) -> LLMEngine | None:
    """Take the key's engine out of use while the job using it is paused (its requests hold
    KV blocks, and the jobs run inside the pause resize pools): they get the spare one made in
    an earlier pause, or a sibling (build). Returns the engine set aside, for put_back."""
    mine = _engines.pop(key, None)
    if mine is not None:
        _aside.setdefault(key, []).append(mine)
    spare = _spares.pop(key, None)
    if spare is not None:
        _engines[key] = spare
    return mine


def put_back(key: tuple, mine: LLMEngine | None) -> None:
    """The paused job goes on: its engine is the key's again; one made meanwhile is kept as
    the spare for its next pause (one spare at most)."""
    if mine is not None and mine in _aside.get(key, ()):
        _aside[key].remove(mine)
        if not _aside[key]:
            del _aside[key]
    spare = _engines.pop(key, None)
    if spare is not None and spare is not mine:
        _spares.clear()
        _spares[key] = spare
    if mine is not None:
        _engines[key] = mine
        _evict()


def _engine_steps(key: tuple) -> Steps[LLMEngine]:
    preset, device, backend, kv_budget_mib, random_weights, weight_format, prefix_caching = key
    engine = yield from LLMEngine.build_steps(EngineConfig(
        preset=preset, device=device, backend=backend, random_weights=random_weights,
        prefix_caching=prefix_caching, weight_format=weight_format,
        kv_budget_bytes=kv_budget_mib * 2**20 if kv_budget_mib else
        smallest_pool_bytes(preset, device),
    ))
    if not kv_budget_mib:
        _fitted.add(engine)
    yield "model ready; warming it up"
    engine.warm_up()
    return engine


def describe(key: tuple) -> str:
    """An engine or model key in a log line: its settings that are not the defaults."""
    names = ("preset", "device", "backend", "kv_budget_mib", "random_weights", "weight_format",
             "prefix_caching")
    if len(key) == 5:  # model_key's
        names = tuple(n for n in names if n not in ("kv_budget_mib", "prefix_caching"))
    plain = {"device": "auto", "backend": "auto", "kv_budget_mib": None, "random_weights": False,
             "weight_format": "fp32", "prefix_caching": False}
    said = [str(v) if n == "preset" else f"{n}={v}"
            for n, v in zip(names, key) if n not in plain or plain[n] != v]
    return " ".join(said)


def _note_built(key: tuple, timings: list[tuple[str, float]]) -> None:
    """Log a finished build with the time of its steps (a plan's timing rounds summed)."""
    parts: dict[str, float] = {}
    for what, seconds in timings:
        name = "plan timing" if ("round" in what or "timed for" in what) else what
        parts[name] = parts.get(name, 0.0) + seconds
    total = sum(parts.values())
    log.info("built the %s engine in %.2f s (%s)", describe(key), total,
             ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    trace.mark("built", key=list(key), s=total, parts=parts)


def smallest_pool_bytes(preset: str, device: str = "auto") -> int:
    """A pool that holds one sequence of the preset's full context (and the scratch block)."""
    cfg = get_preset(preset)
    device = resolve_device(device)
    per_token = cfg.kv_bytes_per_token(torch_dtype(cfg.dtype_name(device)).itemsize)
    return (cfg.context + EngineConfig.block_size) * per_token


def fit_kv(engine: LLMEngine, lengths: Iterable[int]) -> None:
    """Size a fitted engine's KV pool for sequences of these total lengths (prompt plus output)
    held at once; an engine built with an explicit budget keeps it."""
    if engine not in _fitted:
        return
    need = 1 + sum(engine.blocks_per_sequence(n) for n in lengths)  # and the scratch block
    floor = smallest_pool_bytes(engine.config.preset, engine.device) // engine.cache.bytes_per_block
    target = max(floor, 1 << (need - 1).bit_length())  # the next power of two
    ceiling = max(floor, default_budget(engine.device) // engine.cache.bytes_per_block)
    target = min(target, ceiling)  # a job bigger than that is refused by its own check
    current = engine.cache.num_blocks
    if target > current or current >= SHRINK_AT * target:
        started = time.monotonic()
        engine.resize_kv_cache(target * engine.cache.bytes_per_block)
        engine.warm_up()
        trace.mark("resize", blocks=[current, target], s=time.monotonic() - started)


def resident_lengths(requests, max_batch: int) -> list[int]:
    """The KV positions of the max_batch longest requests: the most a served run holds at once
    (a scheduler admits at most max_batch, each needing its full length)."""
    need = sorted((kv_tokens_needed(len(r.prompt_ids), r.output_len) for r in requests),
                  reverse=True)
    return need[:max_batch]
