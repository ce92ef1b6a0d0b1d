"""What a page's job status says, in words: where a result came from (cached or live, on which
device, when), how steady and how trustworthy it was, a nearby result's difference from the
settings asked for, a run's figure while it goes on, where a job waits in the engine's queue,
and what measured a result. Pure functions of the engine's records; widgets.job_status places
them on the page and keeps them current.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.errors import ResultError
from engine.lab.results import DisturbanceCheck, Spread

RANDOM_WEIGHTS = "random weights: timing only"


def format_time(iso: str) -> str:
    """'2026-11-22T02:48:18+0000' -> '2026-11-22 02:48 UTC+00:00'; unparsable text as is."""
    try:
        when = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return iso
    return when.strftime("%Y-%m-%d %H:%M ") + (when.tzname() or "")


def describe_measurement(cached: bool, device: str, measured_at: str, how: str = "") -> str:
    """The provenance line under a measured number; `how` replaces "measured live" for a
    result not all measured live (a replay on measured costs says so, never "live")."""
    where = f"on {device}" if device else "on this machine"
    when = f" at {format_time(measured_at)}" if measured_at else ""
    if how:
        return f"cached: {how}, {where}{when}" if cached else f"{how}, {where}{when}"
    return f"cached: measured {where}{when}" if cached else f"measured live {where}{when}"


def spread_text(spread: Spread | None) -> str:
    """'decode steps p10-p90 2.10-2.40 ms (29 timed)': how steady the timed steps were."""
    if spread is None or not spread.count or spread.p10 is None:
        return ""
    plural = "s" if not spread.what.endswith("s") else ""
    return (f"{spread.what}{plural} p10\u2013p90 {_ms(spread.p10)}\u2013{_ms(spread.p90)} ms "
            f"({spread.count} timed)")


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def disturbed_text(check: DisturbanceCheck | None, remeasuring: bool = False) -> str:
    """Why a result is not to be trusted, or '' when it is."""
    if check is None or not check.disturbed:
        return ""
    why = check.reasons[0] if check.reasons else "other work ran beside it"
    then = ("re-measuring once the engine's core is quiet" if remeasuring else
            "not cached; measure again when the machine is quiet")
    return f"DISTURBED: {why}; {then}"


# A result measured on the plain path (before the engine's set-up built its kernels and timed its
# plans, or where they cannot be built): slower than the engine the lessons describe.
PLAIN_PATH = ("measured on the plain path (the engine's C++ kernels and plans not set up yet; "
              "see the About page)")


@dataclass(frozen=True)
class Measurement:
    """What the label says about one job's result: where it came from and how good it is."""

    cached: bool
    device: str
    measured_at: str
    spread: Spread | None = None
    check: DisturbanceCheck | None = None
    remeasuring: bool = False
    path: str = ""  # "plain": measured before the engine's set-up (engine.lab.setup_state)
    how: str = ""  # the result's `provenance` when not all of it was measured live

    @classmethod
    def of(cls, event) -> Measurement:
        """From a result event; a result without a readable spread or check has none."""
        data = event.data if isinstance(event.data, dict) else {}
        try:
            spread = Spread.from_dict(data["spread"]) if data.get("spread") else None
            check = DisturbanceCheck.from_dict(data["check"]) if data.get("check") else None
        except ResultError:
            spread = check = None
        try:
            how = getattr(event.result, "provenance", "") or ""
        except (AttributeError, ResultError, KeyError):
            how = ""
        return cls(event.cached, event.device, event.measured_at, spread, check,
                   getattr(event, "remeasuring", False), str(data.get("path") or ""), how)

    @property
    def disturbed(self) -> bool:
        return self.check is not None and self.check.disturbed


def describe_nearby(asked: dict, near: dict) -> str:
    """What a nearby result differs in: "batch_size 16 (you asked for 12)"; the settings the
    reader asked for, one by one, that the shown result was not measured with."""
    diffs = [f"{name} {_setting(near[name])} (you asked for {_setting(asked.get(name))})"
             for name in sorted(near) if near[name] != asked.get(name)]
    return ", ".join(diffs) or "the same settings"


def _setting(value) -> str:
    if isinstance(value, list):
        return "-".join(_setting(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def so_far_text(so_far: dict | None, stopped: bool = False) -> str:
    """A run's figure while it goes on (engine.lab.jobs.serving.SoFar), labelled as partial:
    'measured live so far: median end-to-end latency 143 ms over the 5 requests answered (the
    run goes on)'; '' before the first answer. stopped: the run was cut short after this figure
    and starts again in full (engine.lab.policy.at_first_figure)."""
    if not isinstance(so_far, dict) or not isinstance(so_far.get("e2e_p50_ms"), int | float):
        return ""
    answered = so_far.get("answered", 0)
    which = "the first request answered" if answered == 1 else \
        f"the {answered} requests answered"
    then = ("the run was stopped there for other readers and starts again in full after them"
            if stopped else "the run goes on")
    return (f"measured live so far: median end-to-end latency {so_far['e2e_p50_ms']:,.0f} ms "
            f"over {which} ({then})")


def queue_message(ahead: int, preempted: bool = False, resumes: bool = False) -> str:
    """Where a job waits: how many jobs of other readers the engine runs first (preempted: it
    was stopped for them and starts again; resumes: it was paused for them, a load test between
    two steps or its model's loading, and goes on where it stopped)."""
    if ahead <= 0:
        return "starting"
    jobs = f"{ahead} job{'s' if ahead != 1 else ''}"
    if resumes:
        return (f"paused for {jobs} of other readers, short measurements first; it goes on "
                "where it stopped after them")
    if preempted:
        return (f"paused for {jobs} of other readers, short measurements first; it starts "
                "again after them")
    return (f"queued behind {jobs} from other readers (the engine runs one at a time: short "
            "measurements first, readers in turn)")


def weights_text(weights: str | None) -> str:
    return RANDOM_WEIGHTS if weights == "random" else f"{weights or 'trained'} weights"


def provenance(result, event=None) -> str:
    """'tiny preset (trained weights) on cpu: <model> (2 cores)': what measured these numbers,
    from a result record that names its preset, weights and device (engine.lab.results); the
    device from the result event when it names one."""
    device = (event.device if event is not None and event.device else "") or \
        result.device or "this machine"
    return f"{result.preset} preset ({weights_text(result.weights)}) on {device}"


def label_parts(results: list[Measurement]) -> list[str]:
    """The provenance line's parts for a group's results, in the order they came: the live
    ones, the cached ones (with the span of their times), how steady a single result was, and
    how many were measured on the plain path."""
    cached = [r for r in results if r.cached]
    live = [r for r in results if not r.cached]
    several = len(results) > 1
    parts = []
    if live:
        line = describe_measurement(False, live[-1].device, live[-1].measured_at, live[-1].how)
        parts.append(f"{len(live)} {line}" if several else line)
    if cached:
        first = min(r.measured_at for r in cached)
        last = max(r.measured_at for r in cached)
        device = cached[-1].device
        how = cached[-1].how
        line = describe_measurement(True, device, first, how) if first == last else (
            f"cached: {how + ', ' if how else 'measured '}on {device or 'this machine'} at "
            f"{format_time(first)} to {format_time(last)}")
        parts.append(f"{len(cached)} {line}" if several else line)
    steady = spread_text(results[-1].spread) if results and not several else ""
    if steady:
        parts.append(steady)
    plain = [r for r in results if r.path == "plain"]
    if plain:
        count = f"{len(plain)} " if several else ""
        parts.append(f"{count}{PLAIN_PATH}")
    return parts


def disturbed_line(results: list[Measurement]) -> str:
    """'2 of 5 DISTURBED: why; what happens next', or '' when no result was disturbed."""
    disturbed = [r for r in results if r.disturbed]
    if not disturbed:
        return ""
    worst = disturbed[-1]
    count = f"{len(disturbed)} of {len(results)} " if len(results) > 1 else ""
    return count + disturbed_text(worst.check, worst.remeasuring)
