"""Who may change the class run: the holder of the teacher's key.

The key comes from $LLM_SPEED_TEACHER_KEY, or is made once per server process and printed once
to its standard error ("Teacher key: ..."), so the teacher reads it where the server
runs. The console takes it once and keeps it in a cookie (COOKIE); the JSON routes take it in
the X-Teacher-Key header or that cookie. Keys are compared in constant time
(hmac.compare_digest), so the time of a refusal says nothing about how much of a guess was right.
A refusal is logged with what was asked and from where, never with the key that was tried.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import sys
import threading

ENV = "LLM_SPEED_TEACHER_KEY"
COOKIE = "llm_speed_teacher_key"
HEADER = "X-Teacher-Key"

log = logging.getLogger(__name__)
_lock = threading.Lock()
_key: str | None = None


def teacher_key() -> str:
    """The key of this server: $LLM_SPEED_TEACHER_KEY, else one made now and announced once."""
    global _key
    with _lock:
        if _key is None:
            given = os.environ.get(ENV, "").strip()
            if given:
                _key = given
            else:
                _key = secrets.token_urlsafe(9)
                print(f"Teacher key: {_key}  (the class console asks for it; set ${ENV} to "
                      "choose one)", file=sys.stderr, flush=True)
                log.info("a teacher's key was made for this server (printed to stderr)")
        return _key


def forget_key() -> None:
    """Drop the key of this process, so the next teacher_key() reads the environment again."""
    global _key
    with _lock:
        _key = None


def key_ok(given: str | None) -> bool:
    """Whether `given` is the teacher's key (constant-time comparison; None or "" never is)."""
    if not given:
        return False
    return hmac.compare_digest(given.strip().encode(), teacher_key().encode())


def log_refusal(what: str, source: str) -> None:
    """One log line for a change asked for without the key: what, and from where."""
    log.warning("class run: %s refused without the teacher's key (from %s)", what, source)
