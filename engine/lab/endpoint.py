"""The OpenAI-compatible server a teacher points the lessons at (vLLM, SGLang, our own
`python -m engine serve`, ...), instead of the built-in engine.

The teacher sets it when starting the app, never a reader through a page: the app's server makes
the requests, so a URL typed into a page would let anyone aim it at any host. Two ways:

    panel serve app.py --args --endpoint http://gpu-box:8000/v1 --model meta-llama/Llama-3.1-8B
    LLM_SPEED_ENDPOINT=http://gpu-box:8000/v1 LLM_SPEED_MODEL=... panel serve app.py

Torch-free: the web side reads it to offer the source choice and to label what it shows.
"""

from __future__ import annotations

import argparse
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ConfigError

ENV_URL = "LLM_SPEED_ENDPOINT"
ENV_MODEL = "LLM_SPEED_MODEL"


def api_base(url: str) -> str:
    """The /v1 base of a server URL: http://host:8000 and http://host:8000/v1 both give
    http://host:8000/v1. ConfigError for anything that is not an http(s) URL with a host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"base URL must look like http://host:port/v1 (got {url!r})")
    base = url.strip().rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


@dataclass(frozen=True)
class Endpoint:
    """A server's /v1 base URL and the model to ask it for."""

    url: str
    model: str

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def metrics_url(self) -> str:
        """Its Prometheus metrics: /metrics at the server's root, where vLLM and
        `python -m engine serve` both expose them (engine.serve.prometheus)."""
        return self.url.removesuffix("/v1") + "/metrics"

    @property
    def label(self) -> str:
        """How every number measured there is labelled: the model and the host."""
        return f"{self.model} at {self.host}"


def metrics_html(point: Endpoint | None) -> str:
    """The about page's line on live server metrics: the configured server's /metrics link, or
    how to get one from the lab's own engine (its worker has no HTTP server of its own)."""
    serve = ("<code>python -m engine serve</code> serves this lab's engine over HTTP with "
             "Prometheus metrics at <code>/metrics</code>, under vLLM's metric names")
    if point is None:
        return f"<p>Live metrics: {serve}; start the app with <code>--endpoint</code> to link " \
               "them here.</p>"
    url = html.escape(point.metrics_url, quote=True)
    return (f'<p>Live metrics of the server the lessons can measure ({html.escape(point.label)}):'
            f' <a href="{url}">{url}</a>, in Prometheus\' text format, as read from where this '
            f"app runs. {serve}.</p>")


def measured_on(params: dict) -> str | None:
    """Where a job with these parameters measured: '<model> at <host>, over HTTP' for a job
    sent to an endpoint (its params name url and model), None for the built-in engine's jobs
    (measured on the worker's own device). The status line's provenance says this."""
    url, model = params.get("url"), params.get("model")
    if not url or not model:
        return None
    return f"{Endpoint(url, model).label}, over HTTP"


def endpoint(url: str, model: str) -> Endpoint:
    """A checked Endpoint (ConfigError naming what is wrong)."""
    if not model.strip():
        raise ConfigError("the endpoint needs a model name (--model M)")
    return Endpoint(api_base(url), model.strip())


_configured: Endpoint | None = None


def configure(argv: Sequence[str] | None = None) -> Endpoint | None:
    """Set the endpoint from `--endpoint URL --model M` in argv (other arguments are left
    alone), else from $LLM_SPEED_ENDPOINT and $LLM_SPEED_MODEL; None (the built-in engine only)
    when neither names one. ConfigError when only half is given or the URL is not one."""
    global _configured
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--endpoint", default=os.environ.get(ENV_URL) or None)
    parser.add_argument("--model", default=os.environ.get(ENV_MODEL) or None)
    args, _ = parser.parse_known_args(list(argv or []))
    if args.endpoint is None and args.model is None:
        _configured = None
    elif args.endpoint is None or args.model is None:
        raise ConfigError(f"an endpoint needs both a URL and a model: --endpoint URL --model M "
                          f"(or ${ENV_URL} and ${ENV_MODEL})")
    else:
        _configured = endpoint(args.endpoint, args.model)
    return _configured


def configured() -> Endpoint | None:
    """The endpoint the teacher set (see configure), or None."""
    return _configured
