"""The throughput-latency Pareto frontier: which operating points no other point beats on both.

Serving teams compare settings (batch sizes, request rates, concurrencies) on one chart: total
tokens/s of the server against tokens/s each user gets. A point is on the frontier when no other
point gives at least as much on both axes and more on one; the points under it are settings
that waste something. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence


def on_frontier(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each (per-user, total) point, whether it is on the frontier (both larger is better).
    Points with a missing or non-finite value are never on it."""
    def ok(p):
        return p[0] is not None and p[1] is not None and p[0] == p[0] and p[1] == p[1]

    flags = []
    for i, p in enumerate(points):
        if not ok(p):
            flags.append(False)
            continue
        beaten = any(ok(q) and q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])
                     for j, q in enumerate(points) if j != i)
        flags.append(not beaten)
    return flags
