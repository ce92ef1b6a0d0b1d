"""Traffic classes: separate lanes for interactive and batch work on one server.

A request carries a class (interactive, batch, offline, or any name the spec gives) and a
tenant. Each class is a queue with its own admission limits; the continuous scheduler asks
`TrafficState.pick` which waiting request enters a free slot next, instead of taking the oldest.

- Arrival (`TrafficState.arrive`): a request asking more new tokens than its class's cap
  (max_new) is refused, as is one whose class queue is full (max_waiting) or whose tenant's
  bucket could never hold its cost (more tokens than the bucket's burst). A prompt longer than
  its class's max_prompt moves to the background class (the last class listed), so one long
  document does not hold a chat lane. A refusal is a one-line reason, kept in the request's trace.
- Admission (`pick`): a class at its max_running, or whose request-rate bucket is empty, admits
  nobody now. Among the other classes, `strict` order serves the highest priority first (a
  waiting interactive request is always admitted before any waiting batch request); `weighted`
  order serves the class with the fewest admissions per unit of weight, so weights 3 and 1 give
  three admissions to one while both wait. Within a class, the first waiting request whose
  tenant bucket holds its cost goes; a tenant over its quota waits (it is not refused) until its
  bucket refills, and the other tenants of its class go past it.
- Over quota (`TrafficPolicy.over_quota`): "wait" (the default: the request waits in its lane
  until its tenant's bucket refills, as above) or "refuse" (an HTTP server's way, `serve`: a
  request whose tenant's bucket cannot pay for it and for the tenant's requests already waiting
  in its class is refused at arrival, with the time the bucket would hold enough).
- A refusal is a `Refusal`: its one-line reason (a str, kept in traces as is) and its kind,
  CAP (the request breaks a class's limit: it would never run as asked), QUEUE_FULL or QUOTA,
  so a server can answer 400 for the first and 429 for the others.
- Quotas are token buckets: `rate` per second flow in up to `burst`; a request takes its cost
  when it is admitted (the first time only: a preempted request is not charged again). A class
  bucket counts requests; a tenant bucket counts tokens (prompt plus new tokens asked for), as
  the providers' tokens-per-minute limits do.

Everything here is a pure decision on explicit state and a time given by the caller: no clock,
no threads, no engine, so the rules are tested with a fake clock.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum

from .errors import ConfigError

ORDERS = ("strict", "weighted")
OVER_QUOTA = ("wait", "refuse")
DEFAULT_TENANT = "default"

# The spec's keys: name=value pairs after a class name (docs/pages/cli.md lists them).
_INT_KEYS = ("priority", "max_running", "max_waiting", "max_prompt", "max_new")
_FLOAT_KEYS = ("weight", "rate", "burst", "tenant_rate", "tenant_burst")


@dataclass(frozen=True)
class TrafficClass:
    """One lane: its limits, its rank among lanes and its quotas (None: no limit)."""

    name: str
    priority: int = 0  # strict order: higher goes first
    weight: float = 1.0  # weighted order: share of admissions while several classes wait
    max_running: int | None = None  # slots this class may hold at once
    max_waiting: int | None = None  # queue length past which arrivals are refused
    max_prompt: int | None = None  # longer prompts move to the background class
    max_new: int | None = None  # a request asking more new tokens is refused
    rate: float | None = None  # admissions per second (a bucket of `burst` requests)
    burst: float = 1.0
    tenant_rate: float | None = None  # tokens per second per tenant
    tenant_burst: float | None = None  # tokens a tenant's bucket holds (default: 1 s of rate)

    @property
    def tenant_capacity(self) -> float | None:
        if self.tenant_rate is None:
            return None
        return self.tenant_burst if self.tenant_burst is not None else self.tenant_rate

    def validate(self) -> None:
        who = f"class {self.name!r}"
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ConfigError(f"class name {self.name!r} must be letters, digits, - or _")
        for key in ("max_running", "max_waiting", "max_prompt", "max_new"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"{who}: {key} must be at least 1 (got {value})")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ConfigError(f"{who}: weight must be a finite number above 0 (got {self.weight})")
        for key in ("rate", "tenant_rate"):
            value = getattr(self, key)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{who}: {key} must be a finite number above 0 (got {value})")
        if not (self.burst >= 1 and math.isfinite(self.burst)):
            raise ConfigError(f"{who}: burst must be at least 1 request (got {self.burst})")
        if self.tenant_burst is not None:
            if self.tenant_rate is None:
                raise ConfigError(f"{who}: tenant_burst needs a tenant_rate")
            if not (self.tenant_burst > 0 and math.isfinite(self.tenant_burst)):
                raise ConfigError(f"{who}: tenant_burst must be a finite number above 0 "
                                  f"(got {self.tenant_burst})")


@dataclass(frozen=True)
class TrafficPolicy:
    """The classes (in the order given) and how they share the slots. The first class takes
    requests that name none; the last is the background class oversized prompts move to."""

    classes: tuple[TrafficClass, ...]
    order: str = "strict"
    over_quota: str = "wait"  # or "refuse" (module docstring)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.classes]

    @property
    def background(self) -> TrafficClass:
        return self.classes[-1]

    def get(self, name: str) -> TrafficClass:
        for c in self.classes:
            if c.name == name:
                return c
        raise KeyError(name)

    def validate(self) -> None:
        if self.order not in ORDERS:
            raise ConfigError(f"unknown class order {self.order!r}: choose one of "
                              f"{', '.join(ORDERS)}")
        if self.over_quota not in OVER_QUOTA:
            raise ConfigError(f"over quota {self.over_quota!r}: choose one of "
                              f"{', '.join(OVER_QUOTA)}")
        if not self.classes:
            raise ConfigError("give at least one traffic class")
        if len(set(self.names)) != len(self.names):
            raise ConfigError("traffic class names must be unique")
        for c in self.classes:
            c.validate()

    def to_json(self) -> dict:
        out = {"order": self.order, "classes": [asdict(c) for c in self.classes]}
        if self.over_quota != "wait":  # the default stays out of the JSON
            out["over_quota"] = self.over_quota
        return out


class RefusalKind(Enum):
    """Why a request was turned away at arrival."""

    CAP = "cap"  # over a class's limit (new tokens, prompt, no such class): never as asked
    QUEUE_FULL = "queue_full"  # its class's queue holds max_waiting already
    QUOTA = "quota"  # its tenant's bucket cannot pay for it (now, or ever)


class Refusal(str):
    """A refusal's one-line reason, with its kind and, for a quota that refills, the seconds
    until the tenant's bucket would hold enough (None: never, or not a quota)."""

    kind: RefusalKind
    retry_after_s: float | None

    def __new__(cls, text: str, kind: RefusalKind, retry_after_s: float | None = None):
        self = super().__new__(cls, text)
        self.kind = kind
        self.retry_after_s = retry_after_s
        return self


def parse_classes(text: str, order: str = "strict", over_quota: str = "wait") -> TrafficPolicy:
    """A policy from `name:key=value,key=value;name:...` (keys: priority, weight,
    max_running, max_waiting, max_prompt, max_new, rate, burst, tenant_rate, tenant_burst).
    Raises ConfigError naming the part it cannot read."""
    classes = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, _, rest = part.partition(":")
        values: dict = {}
        for item in (i.strip() for i in rest.split(",")):
            if not item:
                continue
            key, eq, value = item.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or key not in _INT_KEYS + _FLOAT_KEYS:
                raise ConfigError(f"class {name.strip()!r}: cannot read {item!r}; keys are "
                                  f"{', '.join(_INT_KEYS + _FLOAT_KEYS)} (key=value)")
            try:
                values[key] = int(value) if key in _INT_KEYS else float(value)
            except ValueError:
                kind = "a whole number" if key in _INT_KEYS else "a number"
                raise ConfigError(f"class {name.strip()!r}: {key} must be {kind} "
                                  f"(got {value.strip()!r})") from None
        classes.append(TrafficClass(name=name.strip(), **values))
    policy = TrafficPolicy(tuple(classes), order, over_quota)
    policy.validate()
    return policy


class TokenBucket:
    """`rate` units per second flow in, up to `burst`; it starts full. Over any window of w
    seconds it lets through at most rate * w + burst units."""

    def __init__(self, rate: float, burst: float, t: float = 0.0):
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.t = t

    def level_at(self, now: float) -> float:
        return min(self.burst, self.level + self.rate * max(0.0, now - self.t))

    def can_take(self, now: float, amount: float) -> bool:
        return amount <= self.level_at(now) + 1e-9

    def take(self, now: float, amount: float) -> None:
        self.level = self.level_at(now) - amount
        self.t = max(self.t, now)

    def ready_at(self, amount: float) -> float:
        """The time from which `amount` can be taken (inf if more than the bucket holds)."""
        if amount > self.burst + 1e-9:
            return math.inf
        return self.t + max(0.0, amount - self.level) / self.rate


@dataclass
class Tag:
    """What the traffic layer knows of one request: its lane, its tenant, its token cost."""

    traffic_class: str
    tenant: str
    cost: int  # prompt tokens plus new tokens asked for
    moved: bool = False  # its prompt was over its class's max_prompt: it runs in the background
    charged: bool = False  # its buckets were charged (at its first admission)


@dataclass
class TrafficState:
    """The buckets and the admission counts of one run under a policy."""

    policy: TrafficPolicy
    tags: dict[int, Tag] = field(default_factory=dict)
    admitted: dict[str, int] = field(default_factory=dict)  # first admissions per class
    class_buckets: dict[str, TokenBucket] = field(default_factory=dict)
    tenant_buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)

    def arrive(self, seq_id: int, traffic_class: str | None, tenant: str | None,
               prompt_len: int, max_new: int, waiting: list[int],
               now: float = 0.0) -> Tag | Refusal:
        """Classify an arriving request at time `now`: its Tag (kept), or the Refusal saying
        why it is turned away. waiting: the ids already waiting (for the class's queue limit
        and, refusing over quota, the tenant's requests not yet paid for)."""
        policy = self.policy
        name = traffic_class or policy.classes[0].name
        cap = RefusalKind.CAP
        if name not in policy.names:
            return Refusal(f"refused: no traffic class {name!r} (classes: "
                           f"{', '.join(policy.names)})", cap)
        cls = policy.get(name)
        moved = False
        if cls.max_prompt is not None and prompt_len > cls.max_prompt:
            if cls is policy.background:
                return Refusal(f"refused: a prompt of {prompt_len} tokens is over class "
                               f"{name!r}'s limit of {cls.max_prompt}, and it is the background "
                               "class", cap)
            cls, moved = policy.background, True
            if cls.max_prompt is not None and prompt_len > cls.max_prompt:
                return Refusal(f"refused: a prompt of {prompt_len} tokens is over the background "
                               f"class {cls.name!r}'s limit of {cls.max_prompt} too", cap)
        if cls.max_new is not None and max_new > cls.max_new:
            return Refusal(f"refused: class {cls.name!r} caps new tokens at {cls.max_new}; this "
                           f"request asked for {max_new}", cap)
        queued = sum(1 for i in waiting if self.tags[i].traffic_class == cls.name)
        if cls.max_waiting is not None and queued >= cls.max_waiting:
            return Refusal(f"refused: class {cls.name!r}'s queue is full ({cls.max_waiting} "
                           "waiting)", RefusalKind.QUEUE_FULL)
        tag = Tag(cls.name, tenant or DEFAULT_TENANT, prompt_len + max_new, moved)
        capacity = cls.tenant_capacity
        if capacity is not None and tag.cost > capacity:
            return Refusal(f"refused: tenant {tag.tenant!r}'s bucket in class {cls.name!r} "
                           f"holds at most {capacity:g} tokens; this request needs {tag.cost}",
                           RefusalKind.QUOTA)
        if policy.over_quota == "refuse" and capacity is not None:
            refusal = self._over_quota(cls, tag, waiting, now)
            if refusal is not None:
                return refusal
        self.tags[seq_id] = tag
        return tag

    def _over_quota(self, cls: TrafficClass, tag: Tag, waiting: list[int],
                    now: float) -> Refusal | None:
        """Refusing over quota: None if the tenant's bucket pays for tag and for the tenant's
        unpaid requests waiting in its class, else the Refusal with the time until it would."""
        bucket = self._tenant_bucket(cls, tag.tenant, now)
        pending = sum(self.tags[i].cost for i in waiting
                      if self.tags[i].traffic_class == cls.name
                      and self.tags[i].tenant == tag.tenant and not self.tags[i].charged)
        need = pending + tag.cost
        if need <= bucket.level_at(now) + 1e-9:
            return None
        if need > bucket.burst + 1e-9:  # it waits behind the tenant's queue: no set time
            retry, when = None, "once its waiting requests have run"
        else:
            retry = (need - bucket.level_at(now)) / bucket.rate
            when = f"in {retry:.1f} s"
        return Refusal(f"refused: tenant {tag.tenant!r} is over its quota in class "
                       f"{cls.name!r} ({cls.tenant_rate:g} tokens/s, {bucket.burst:g} at most); "
                       f"this request needs {tag.cost} tokens, {need - tag.cost} more are "
                       f"waiting, and the bucket holds {bucket.level_at(now):.0f}: retry {when}",
                       RefusalKind.QUOTA, retry)

    def forget(self, seq_id: int) -> None:
        self.tags.pop(seq_id, None)

    # ---- buckets ------------------------------------------------------------------------
    def _class_bucket(self, cls: TrafficClass, now: float) -> TokenBucket | None:
        if cls.rate is None:
            return None
        if cls.name not in self.class_buckets:
            self.class_buckets[cls.name] = TokenBucket(cls.rate, cls.burst, now)
        return self.class_buckets[cls.name]

    def _tenant_bucket(self, cls: TrafficClass, tenant: str, now: float) -> TokenBucket | None:
        if cls.tenant_rate is None:
            return None
        key = (cls.name, tenant)
        if key not in self.tenant_buckets:
            self.tenant_buckets[key] = TokenBucket(cls.tenant_rate, cls.tenant_capacity, now)
        return self.tenant_buckets[key]

    def _class_ready(self, cls: TrafficClass, now: float) -> bool:
        bucket = self._class_bucket(cls, now)
        return bucket is None or bucket.can_take(now, 1)

    def _tenant_ready(self, cls: TrafficClass, tag: Tag, now: float) -> bool:
        bucket = self._tenant_bucket(cls, tag.tenant, now)
        return bucket is None or bucket.can_take(now, tag.cost)

    # ---- the decision -------------------------------------------------------------------
    def pick(self, waiting: list[int], running: list[int], now: float) -> int | None:
        """The waiting request (by id, `waiting` in queue order) that goes into the next free
        slot under the policy, or None if every waiting request must wait now."""
        by_class: dict[str, int] = {}
        for seq_id in running:
            name = self.tags[seq_id].traffic_class
            by_class[name] = by_class.get(name, 0) + 1
        heads: dict[str, int] = {}  # each open class's first request its tenant lets through
        closed: set[str] = set()  # classes that admit nobody now
        for seq_id in waiting:
            tag = self.tags[seq_id]
            name = tag.traffic_class
            if name in heads or name in closed:
                continue
            cls = self.policy.get(name)
            if cls.max_running is not None and by_class.get(name, 0) >= cls.max_running:
                closed.add(name)
            elif tag.charged:  # preempted earlier: its quotas were paid at its first admission
                heads[name] = seq_id
            elif not self._class_ready(cls, now):
                closed.add(name)
            elif self._tenant_ready(cls, tag, now):  # else its tenant waits, others go past
                heads[name] = seq_id
        if not heads:
            return None
        order = [c for c in self.policy.classes if c.name in heads]
        if self.policy.order == "strict":
            best = max(order, key=lambda c: c.priority)  # ties: the class listed first
        else:
            best = min(order, key=lambda c: self.admitted.get(c.name, 0) / c.weight)
        return heads[best.name]

    def admit(self, seq_id: int, now: float) -> None:
        """seq_id entered a slot: charge its buckets the first time, count it for its class."""
        tag = self.tags[seq_id]
        if tag.charged:
            return
        cls = self.policy.get(tag.traffic_class)
        bucket = self._class_bucket(cls, now)
        if bucket is not None:
            bucket.take(now, 1)
        bucket = self._tenant_bucket(cls, tag.tenant, now)
        if bucket is not None:
            bucket.take(now, tag.cost)
        tag.charged = True
        self.admitted[cls.name] = self.admitted.get(cls.name, 0) + 1

    def next_ready(self, waiting: list[int]) -> float | None:
        """The earliest time a bucket lets a waiting request in (None: no bucket holds any),
        so an idle loop knows when to look again."""
        times = []
        for seq_id in waiting:
            tag = self.tags[seq_id]
            if tag.charged:
                continue
            cls = self.policy.get(tag.traffic_class)
            ready = 0.0
            bucket = self.class_buckets.get(cls.name)
            if bucket is not None:
                ready = max(ready, bucket.ready_at(1))
            bucket = self.tenant_buckets.get((cls.name, tag.tenant))
            if bucket is not None:
                ready = max(ready, bucket.ready_at(tag.cost))
            if ready > 0 and math.isfinite(ready):
                times.append(ready)
        return min(times) if times else None
