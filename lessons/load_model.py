"""The two ways a load test drives a server, as the pages that offer both name them (lessons 2
and 3; the glossary's "Open-loop load" and "Closed-loop load").

Open loop: requests arrive at a rate, whether or not earlier ones are answered. Closed loop: a
fixed number of users, each sending their next request when their last answer ends. The names
are the field's (GuideLLM, vLLM's bench, AIPerf: request rate against concurrency).
"""

from __future__ import annotations

OPEN, CLOSED = "open", "closed"  # in the URL: load=closed
LOADS = {"open loop: arrival rate": OPEN, "closed loop: concurrent users": CLOSED}
