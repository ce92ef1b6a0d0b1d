"""What a load test reports beyond the run's metrics: attainment of each SLO beside the
overall goodput, good-token throughput, percentiles the user picks, and the result file in the
key names `vllm bench serve --save-result` writes, so plotting scripts written for vLLM read it.

SLOs are per-request limits in ms (None: not checked). A request meets
- the TTFT limit when its TTFT is within it; the TPOT limit when its TPOT is (a one-token
  request has no TPOT and meets it, as vLLM counts its TPOT as 0); the E2E limit likewise
  (engine.calc.slo_math.meets_slo, the one definition of those three);
- the ITL limit when every gap between two of its tokens is within it (its largest gap): an
  answer that stalls once has missed it, however smooth the rest was.
Attainment of one SLO = completed requests meeting that limit / completed requests; goodput =
requests meeting every limit given / the run's duration; good-token throughput = the output
tokens of those requests / the duration (DistServe's goodput, in tokens).

The result file's keys and definitions are vLLM's (vllm/benchmarks/serve.py): mean, median,
std (numpy's, population) and p{q} of ttft, tpot, itl and e2el in ms, over the completed
requests; max_output_tokens_per_s and max_concurrent_requests from one-second buckets counted
from the first request's sending. Its duration is ours, the measured requests' first sending to
their last token (vLLM's is the benchmark's wall time, which adds the last stream's closing).
Our extra fields are added under their own names, none renamed.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..calc import slo_math
from .metrics import e2e_ms, itl_ms, output_tokens, tpot_ms, ttft_ms
from .trace import RequestTrace

DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)
VLLM_PERCENTILE = 99.0  # `vllm bench serve --metric-percentiles` default, always written


@dataclass(frozen=True)
class SLOs:
    """Per-request limits in ms; None is not checked."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def given(self) -> dict[str, float]:
        return {k.removesuffix("_ms"): v for k, v in asdict(self).items() if v is not None}

    def checks(self, r: RequestTrace) -> dict[str, bool]:
        """Which of the given limits one finished request met."""
        out = {}
        if self.ttft_ms is not None:
            out["ttft"] = slo_math.meets_slo(ttft_ms(r), None, ttft_limit_ms=self.ttft_ms)
        if self.tpot_ms is not None:
            out["tpot"] = slo_math.meets_slo(0.0, tpot_ms(r), tpot_limit_ms=self.tpot_ms)
        if self.itl_ms is not None:
            out["itl"] = max(itl_ms(r), default=0.0) <= self.itl_ms
        if self.e2e_ms is not None:
            out["e2e"] = slo_math.meets_slo(0.0, None, e2e_ms(r), e2e_limit_ms=self.e2e_ms)
        return out


def finished(traces: list[RequestTrace]) -> list[RequestTrace]:
    return [r for r in traces if r.finish_s is not None and r.token_s]


def slo_report(traces: list[RequestTrace], slos: SLOs, duration_s: float | None) -> dict | None:
    """Attainment of each SLO, the share meeting all, goodput in requests and tokens per
    second (module docstring); None when no SLO is given."""
    if not slos.given:
        return None
    done = finished(traces)
    checks = [slos.checks(r) for r in done]
    good = [r for r, c in zip(done, checks) if all(c.values())]
    n = len(done)

    def share(count: int) -> float | None:
        return count / n if n else None

    def rate(count: float) -> float | None:
        return count / duration_s if duration_s else None

    good_tokens = sum(output_tokens(r) for r in good)
    return {
        "limits_ms": slos.given,
        "attainment": {k: share(sum(c[k] for c in checks)) for k in slos.given},
        "attainment_all": share(len(good)),
        "requests_meeting_slo": len(good),
        "completed": n,
        "goodput_rps": rate(len(good)),
        "good_tokens": good_tokens,
        "goodput_tok_s": rate(good_tokens),
    }


def percentile_key(q: float) -> str:
    """vLLM's name for a percentile: p99, p99.9."""
    return f"p{int(q)}" if int(q) == q else f"p{q}"


def _stats(name: str, values: list[float], percentiles: tuple[float, ...]) -> dict:
    """mean, median, std and the percentiles of values in ms, under vLLM's keys; None for
    none (vLLM writes 0 there, a figure nothing measured)."""
    data = np.asarray(values, dtype=np.float64)
    out = {f"mean_{name}_ms": None, f"median_{name}_ms": None, f"std_{name}_ms": None}
    out.update({f"{percentile_key(q)}_{name}_ms": None for q in percentiles})
    if data.size:
        out[f"mean_{name}_ms"] = float(data.mean())
        out[f"median_{name}_ms"] = float(np.median(data))
        out[f"std_{name}_ms"] = float(data.std())
        for q in percentiles:
            out[f"{percentile_key(q)}_{name}_ms"] = float(np.percentile(data, q))
    return out


def peaks(done: list[RequestTrace]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: tokens, and requests active,
    in each one-second bucket from the first sending; the largest of each."""
    if not done:
        return 0.0, 0
    t0 = min(r.arrival_s for r in done)
    buckets = int(math.ceil(max(r.token_s[-1] for r in done) - t0)) + 1
    tokens = np.zeros(buckets)
    active = np.zeros(buckets)
    for r in done:
        for t in r.token_s:
            tokens[int(t - t0)] += 1
        active[int(r.arrival_s - t0): int(r.token_s[-1] - t0) + 1] += 1
    return float(tokens.max()), int(active.max())


def per_request(done: list[RequestTrace]) -> dict[str, list[float]]:
    """Each metric's values in ms over the finished requests (ITL: every gap, pooled)."""
    return {"ttft": [ttft_ms(r) for r in done],
            "tpot": [t for t in (tpot_ms(r) for r in done) if t is not None],
            "itl": [gap for r in done for gap in itl_ms(r)],
            "e2el": [e2e_ms(r) for r in done]}


def vllm_result(traces: list[RequestTrace], failed: int, duration_s: float | None, *,
                model: str, request_rate: float, burstiness: float,
                max_concurrency: int | None, slos: SLOs, percentiles=DEFAULT_PERCENTILES,
                extra: dict | None = None) -> dict:
    """One run's result under `vllm bench serve --save-result`'s keys (module docstring), then
    `extra`'s fields (ours) and the SLO report under "slo". traces: every measured request
    sent, failed ones included (failed of them)."""
    done = finished(traces)
    total_in = sum(r.prompt_len for r in done)
    total_out = sum(output_tokens(r) for r in done)
    report = slo_report(traces, slos, duration_s)

    def per_s(count: float) -> float | None:
        return count / duration_s if duration_s else None

    peak_tokens, peak_requests = peaks(done)
    result = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": len(traces),
        "request_rate": "inf" if math.isinf(request_rate) else request_rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": duration_s,
        "completed": len(done),
        "failed": failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": report["goodput_rps"] if report else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
    }
    every = tuple(sorted({*percentiles, VLLM_PERCENTILE}))  # p99 always: vLLM's default
    for name, values in per_request(done).items():
        result.update(_stats(name, values, every))
    result.update(extra or {})
    result["slo"] = report
    result["goodput_tok_s"] = report["goodput_tok_s"] if report else None
    result["percentiles"] = list(percentiles)
    return result
