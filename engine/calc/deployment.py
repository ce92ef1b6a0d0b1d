"""Planning a deployment: how many replicas, at what batch size, for what cost per million tokens.

Pure Python (no torch), so lesson 12 re-plans as the reader types a new demand, from numbers the
engine measured once (lesson 4's batch points) or from datasheet floors (engine.calc.gpu_scaling).

A replica is one copy of the server (one machine, or one group of GPUs serving one copy of the
model). The plan, for a demand (arrival rate, prompt and output lengths) and targets (TTFT, TPOT):

    E2E (ms)               = TTFT + (output tokens - 1) x TPOT       (one request's life)
    requests in flight     = arrival rate x E2E                       (Little's law, L = lambda W)
    replica requests/s     = batch / E2E                              (Little's law, one replica
                                                                       holding `batch` in flight)
    replicas               = ceil(arrival rate / (fill x replica requests/s))
    cost per million tokens = replicas x price per hour / 3600 x 1,000,000 / output tokens/s

It picks, among the batch sizes measured, the one serving the most requests/s whose TPOT and TTFT
are within the targets: a larger batch gives each replica more requests/s and each user slower
tokens (lesson 4). `fill` (below 1) keeps every replica short of full, because a queue grows
without bound as arrivals approach what a server completes (lesson 8's rate sweep): the plan is a
steady-state estimate, and a load test at the planned rate checks it.

Where a load test has measured the same replica (lesson 8's rate sweep at the planned batch
limit), the plan also uses it: the highest offered rate at which at least 95% of requests met
both targets (`highest_rate_within`), converted to requests of the demand's length by the output
tokens/s delivered there (`MeasuredRate`), gives a second count of replicas, ceil(arrival rate /
that rate), with no headroom added (the sweep's random arrivals and queue were in it). The plan
takes the larger count: the more cautious of the arithmetic and the measurement.

Tensor parallelism splits each layer's weights over t GPUs: each reads 1/t of the weights per
step, and the layer's partial results are summed across the GPUs by two all-reduces per layer
(after attention and after the MLP, as in Megatron-LM). A ring all-reduce of S bytes sends
2 (t - 1) / t x S bytes from each GPU; here S = batch x hidden x 2 bytes (bf16 activations).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..lab.results import LoadTestResult, RateSweepResult
from .gpu_scaling import (
    BF16_BYTES,
    Machine,
    ModelShape,
    decode_step,
    prefill_floor_ms,
    step_floor_ms,
)
from .kv_math import blocks_for
from .rate_sweep import pool_runs
from .slo_math import Targets, cost_per_million_tokens

FILL = 0.8  # plan each replica to 80% of what it completes, leaving room for bursts
ATTAINMENT = 0.95  # a load meets the targets when this share of its requests meets both
GPU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the batch sizes the GPU estimate considers
CHECK_SECONDS = 10.0  # the plan's load test: its arrivals span about this long ...
CHECK_REQUESTS = (24, 96)  # ... within these bounds on its number of requests
# What shortens a step at batch 1, said where no batch size meets a target: a decode step
# (TPOT) waits on its weight bytes, a prefill (TTFT) on its arithmetic.
TPOT_CURES = ("a faster machine, fewer weight bytes to read per step (a smaller or quantized "
              "model), fewer target steps per token (speculative decoding) or the weights "
              "split over several GPUs (tensor parallelism)")
TTFT_CURES = ("a faster machine, a smaller model, the prompts' shared part served from a "
              "prefix cache, or the work split over several GPUs (tensor parallelism)")


@dataclass(frozen=True)
class Demand:
    """What the service must carry: requests per second and each request's size in tokens."""

    rate_rps: float
    prompt_len: int
    output_len: int

    @property
    def output_tok_s(self) -> float:
        return self.rate_rps * self.output_len


@dataclass(frozen=True)
class BatchPoint:
    """One replica running `batch` requests at once: its TTFT and TPOT in ms (measured by the
    engine, or a floor from a datasheet)."""

    batch: int
    ttft_ms: float
    tpot_ms: float


def e2e_ms(ttft_ms: float, tpot_ms: float, output_len: int) -> float:
    """One request's time from arrival to last token: TTFT + (output tokens - 1) x TPOT."""
    return ttft_ms + max(0, output_len - 1) * tpot_ms


def in_flight(rate_rps: float, e2e: float) -> float:
    """Little's law: requests in the system = arrival rate x time each spends there (E2E)."""
    return rate_rps * e2e / 1000


def replica_rps(batch: int, e2e: float) -> float:
    """Little's law read the other way: a replica holding `batch` requests, each for E2E ms,
    completes batch / E2E of them per second."""
    return 1000 * batch / e2e


def replicas_needed(rate_rps: float, per_replica_rps: float, fill: float = FILL) -> int:
    """ceil(arrival rate / (fill x one replica's requests/s)), at least 1."""
    if not 0 < fill <= 1:
        raise ValueError(f"the fill share must be above 0 and at most 1 (got {fill})")
    return max(1, math.ceil(rate_rps / (fill * per_replica_rps) - 1e-9))


@dataclass(frozen=True)
class LoadPoint:
    """One offered rate of a load test on one replica (a rate of lesson 8's sweep, its runs
    together): each finished request's TTFT and TPOT in ms (None: a one-token answer, which
    meets any TPOT target) and the output tokens/s the replica delivered."""

    rate_rps: float
    ttft_ms: Sequence[float]
    tpot_ms: Sequence[float | None]
    output_tok_s: float | None

    def met_share(self, targets: Targets) -> float:
        """Share of the requests that met both targets (0 when none finished)."""
        slo = targets.slo()
        met = sum(slo.met(a, b) for a, b in zip(self.ttft_ms, self.tpot_ms, strict=True))
        return met / len(self.ttft_ms) if self.ttft_ms else 0.0


def highest_rate_within(points: Sequence[LoadPoint], targets: Targets,
                        bar: float = ATTAINMENT) -> LoadPoint | None:
    """The highest offered rate at which at least `bar` of the requests met both targets, going
    up from the lowest and stopping at the first that did not: past what the replica completes
    its queue only grows, so a higher rate that passes again owes it to the luck of its few
    requests. None when the lowest rate already missed (or delivered no tokens)."""
    best = None
    for point in sorted(points, key=lambda p: p.rate_rps):
        if point.met_share(targets) < bar or not point.output_tok_s:
            break
        best = point
    return best


@dataclass(frozen=True)
class MeasuredRate:
    """What a load test measured one replica carrying within the targets: the offered rate, the
    output tokens/s it delivered there, and the replica's batch limit."""

    rate_rps: float
    output_tok_s: float
    batch: int

    def demand_rps(self, demand: Demand) -> float:
        """The same output tokens/s in requests of the demand's length: output tokens/s /
        output tokens per request (the load test's requests may be of other lengths)."""
        return self.output_tok_s / demand.output_len


@dataclass(frozen=True)
class Plan:
    """The chosen batch and what it gives; `batch` is None when no batch meets the targets
    (`why` says which target, and that more replicas cannot fix it). `measured`: a load test of
    a replica at the chosen batch limit, when there is one (module doc)."""

    demand: Demand
    targets: Targets
    fill: float
    point: BatchPoint | None
    why: str = ""
    measured: MeasuredRate | None = None

    @property
    def feasible(self) -> bool:
        return self.point is not None

    @property
    def batch(self) -> int | None:
        return self.point.batch if self.point else None

    @property
    def e2e_ms(self) -> float | None:
        if self.point is None:
            return None
        return e2e_ms(self.point.ttft_ms, self.point.tpot_ms, self.demand.output_len)

    @property
    def replica_rps(self) -> float | None:
        return replica_rps(self.point.batch, self.e2e_ms) if self.point else None

    @property
    def replicas_from_points(self) -> int | None:
        """Little's law on the batch point, at `fill`."""
        if self.point is None:
            return None
        return replicas_needed(self.demand.rate_rps, self.replica_rps, self.fill)

    @property
    def replicas_from_load(self) -> int | None:
        """ceil(arrival rate / the measured rate in the demand's requests), no headroom."""
        if self.point is None or self.measured is None:
            return None
        return replicas_needed(self.demand.rate_rps, self.measured.demand_rps(self.demand), 1.0)

    @property
    def replicas(self) -> int | None:
        """The larger of the two counts (the second only where a load test measured it)."""
        if self.point is None:
            return None
        return max(self.replicas_from_points, self.replicas_from_load or 0)

    @property
    def set_by_load(self) -> bool:
        """Whether the measured load test, not Little's law, set the count of replicas."""
        return bool(self.replicas_from_load) and \
            self.replicas_from_load > self.replicas_from_points

    @property
    def in_flight(self) -> float | None:
        return in_flight(self.demand.rate_rps, self.e2e_ms) if self.point else None

    @property
    def per_replica_rate(self) -> float | None:
        """The arrival rate each replica gets when the load is spread evenly."""
        return self.demand.rate_rps / self.replicas if self.point else None

    @property
    def utilisation(self) -> float | None:
        """Share of its completions each replica is asked for (at most `fill`)."""
        return self.per_replica_rate / self.replica_rps if self.point else None

    def cost_per_million(self, price_per_hour: float) -> float | None:
        """What a million output tokens cost with `replicas` machines at this price each."""
        if self.point is None or self.demand.output_tok_s <= 0:
            return None
        return cost_per_million_tokens(self.replicas * price_per_hour, self.demand.output_tok_s)


def plan(points: Sequence[BatchPoint], demand: Demand, targets: Targets,
         fill: float = FILL, measured: Mapping[int, MeasuredRate] | None = None) -> Plan:
    """Of the points whose TPOT and TTFT meet the targets, the one serving the most requests/s
    per replica (module docstring); none meets them: a Plan without a point, saying why.
    `measured`: load-tested rates by batch limit; the one at the chosen batch joins the plan."""
    if not points:
        raise ValueError("a plan needs at least one measured batch size")
    ok = [p for p in points if p.tpot_ms <= targets.tpot_ms and p.ttft_ms <= targets.ttft_ms]
    if ok:
        best = max(ok, key=lambda p: replica_rps(p.batch, e2e_ms(p.ttft_ms, p.tpot_ms,
                                                                 demand.output_len)))
        return Plan(demand, targets, fill, best, measured=(measured or {}).get(best.batch))
    fastest = min(points, key=lambda p: p.tpot_ms)
    quickest = min(points, key=lambda p: p.ttft_ms)
    if fastest.tpot_ms > targets.tpot_ms:
        why = (f"even batch {fastest.batch}'s TPOT, {fastest.tpot_ms:.3g} ms, is over the "
               f"{targets.tpot_ms:g} ms target")
        cure = TPOT_CURES
    elif quickest.ttft_ms > targets.ttft_ms:
        why = (f"even batch {quickest.batch}'s TTFT, {quickest.ttft_ms:.3g} ms, is over the "
               f"{targets.ttft_ms:g} ms target")
        cure = TTFT_CURES
    else:
        why, cure = "no batch size meets both targets at once", TPOT_CURES
    return Plan(demand, targets, fill, None,
                why + ": more replicas add requests per second, not speed per request, so "
                      "each step must get shorter: " + cure)


# ---- the same plan on a GPU, from its datasheet -----------------------------------------------
def kv_bytes_per_sequence(model: ModelShape, tokens: int, block_size: int = 16) -> int:
    """One sequence's bf16 KV cache in a paged cache: its tokens rounded up to whole blocks."""
    return blocks_for(tokens, block_size) * block_size * model.kv_bytes_per_token


def gpu_points(model: ModelShape, machine: Machine, demand: Demand,
               batches: Sequence[int] = GPU_BATCHES, gpus: int = 1) -> list[BatchPoint]:
    """Floors for each batch whose KV cache fits beside the weights: TTFT = one prompt's
    prefill floor (plus a decode step), TPOT = the decode step floor at the mean context
    (prompt + half the output); on `gpus` GPUs in tensor parallel (tp_step_ms)."""
    context = demand.prompt_len + demand.output_len / 2
    memory = (machine.memory_gb or 0) * 1e9 * gpus - model.weight_bytes
    each = kv_bytes_per_sequence(model, demand.prompt_len + demand.output_len)
    points = []
    for batch in batches:
        if machine.memory_gb is not None and batch * each > memory:
            break
        tpot = tp_step_ms(model, machine, batch, context, gpus)
        prefill = prefill_floor_ms(model, machine, demand.prompt_len) / gpus
        points.append(BatchPoint(batch, prefill + tpot, tpot))
    return points


# NVLink per GPU, both directions together, from the datasheets; a ring all-reduce sends in one
# direction while it receives from the other, so it moves data at half of it.
NVLINK_GBS = {"NVIDIA A100 80GB SXM": 600.0, "NVIDIA H100 SXM": 900.0}
NVLINK_SOURCES = (
    "NVIDIA A100 Tensor Core GPU datasheet: NVLink 600 GB/s",
    "NVIDIA H100 Tensor Core GPU datasheet: NVLink 900 GB/s (SXM)",
)


def hidden_size(model: ModelShape) -> int:
    return model.heads * model.head_dim


def allreduce_bytes(model: ModelShape, batch: int, gpus: int) -> float:
    """Bytes each GPU sends in one decode step's all-reduces: 2 per layer, each a ring
    all-reduce of batch x hidden bf16 activations, 2 (t - 1) / t of them sent per GPU."""
    if gpus <= 1:
        return 0.0
    size = batch * hidden_size(model) * BF16_BYTES
    return 2 * model.layers * 2 * (gpus - 1) / gpus * size


def allreduce_ms(model: ModelShape, machine: Machine, batch: int, gpus: int) -> float:
    """The least time a step's all-reduces take: their bytes over NVLink in one direction
    (half the datasheet's figure). Each all-reduce also has a fixed start-up cost that no
    datasheet states, so this is a floor."""
    if gpus <= 1:
        return 0.0
    link = NVLINK_GBS.get(machine.name)
    if link is None:
        raise ValueError(f"no NVLink figure for {machine.name}")
    return 1000 * allreduce_bytes(model, batch, gpus) / (link / 2 * 1e9)


def tp_step_ms(model: ModelShape, machine: Machine, batch: int, context: float,
               gpus: int = 1) -> float:
    """A decode step's floor on `gpus` GPUs in tensor parallel: each does 1/t of the FLOPs and
    reads 1/t of the bytes (weights and KV are split by heads), then the all-reduces."""
    one = step_floor_ms(decode_step(model, batch, context), machine)
    return one / gpus + allreduce_ms(model, machine, batch, gpus)


@dataclass(frozen=True)
class TPRow:
    """t GPUs as one tensor-parallel replica, against t replicas of one GPU each, at one batch."""

    gpus: int
    tpot_ms: float  # the tensor-parallel replica's step floor
    allreduce_ms: float
    max_batch: int  # sequences whose KV fits in the group's memory beside one copy of the weights
    tp_tok_s: float  # output tokens/s of the tensor-parallel replica at `batch`
    replicas_tok_s: float  # of t single-GPU replicas at `batch` each


def tp_against_replicas(model: ModelShape, machine: Machine, batch: int, demand: Demand,
                        degrees: Sequence[int] = (1, 2, 4, 8)) -> list[TPRow]:
    """For each degree t: tensor parallelism over t GPUs, or t replicas of one GPU, at the
    same batch per replica; every figure a floor from the datasheet."""
    context = demand.prompt_len + demand.output_len / 2
    each = kv_bytes_per_sequence(model, demand.prompt_len + demand.output_len)
    one = tp_step_ms(model, machine, batch, context)
    rows = []
    for t in degrees:
        step = tp_step_ms(model, machine, batch, context, t)
        free = (machine.memory_gb or 0) * 1e9 * t - model.weight_bytes
        rows.append(TPRow(t, step, allreduce_ms(model, machine, batch, t),
                          max(0, int(free // each)), 1000 * batch / step,
                          t * 1000 * batch / one))
    return rows


# ---- what a measured run says of a plan ----------------------------------------------------------
def sweep_points(sweep: RateSweepResult) -> list[LoadPoint]:
    """A rate sweep (the SLO lesson's), one point per rate with its runs' requests together."""
    return [LoadPoint(pt.rate, pt.ttft_ms, pt.tpot_ms, pt.throughput_tok_s)
            for pt in pool_runs(sweep.points)]


def measured_rate(sweep: RateSweepResult, targets: Targets) -> MeasuredRate | None:
    """What a rate sweep measured one replica carrying within the targets, or None."""
    best = highest_rate_within(sweep_points(sweep), targets)
    return MeasuredRate(best.rate_rps, best.output_tok_s, sweep.max_batch) if best else None


def next_batch_misses(p: Plan, points: Sequence[BatchPoint]) -> str | None:
    """Which target ("TPOT" first, then "TTFT") the next larger batch measured misses; None when
    the plan took the largest batch, or a larger batch met both (it completed fewer requests
    per second). The plan must be feasible."""
    larger = sorted((pt for pt in points if pt.batch > p.batch), key=lambda pt: pt.batch)
    if not larger:
        return None
    if larger[0].tpot_ms > p.targets.tpot_ms:
        return "TPOT"
    if larger[0].ttft_ms > p.targets.ttft_ms:
        return "TTFT"
    return None


def request_latencies(run: LoadTestResult) -> list[tuple[float, float | None]]:
    """Each finished request's (TTFT, TPOT) in ms from a load test's trace."""
    out = []
    for r in run.requests:
        if r.first_token_s is None or r.finish_s is None or r.arrival_s is None:
            continue
        ttft = 1000 * (r.first_token_s - r.arrival_s)
        tpot = (1000 * (r.finish_s - r.first_token_s) / (r.output_len - 1)
                if r.output_len > 1 else None)
        out.append((ttft, tpot))
    return out


@dataclass(frozen=True)
class LoadCheck:
    """A load test judged against a plan's targets: requests within both, of those finished."""

    good: int
    finished: int

    @property
    def share(self) -> float:
        return self.good / self.finished if self.finished else 0.0

    @property
    def held(self) -> bool:
        """The plan's bar: at least ATTAINMENT of the finished requests within both targets."""
        return bool(self.finished) and self.share >= ATTAINMENT


def check_load(run: LoadTestResult, targets: Targets) -> LoadCheck:
    slo = targets.slo()
    lat = request_latencies(run)
    return LoadCheck(sum(slo.met(a, b) for a, b in lat), len(lat))
