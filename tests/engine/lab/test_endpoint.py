"""The teacher's endpoint: set by --endpoint/--model (or the environment), checked, labelled with
its model and host; half a setting or a URL that is not one is refused in words."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.lab import endpoint


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(endpoint.ENV_URL, raising=False)
    monkeypatch.delenv(endpoint.ENV_MODEL, raising=False)
    yield
    endpoint.configure([])


def test_none_unless_the_teacher_names_one():
    assert endpoint.configure(["--port", "5006"]) is None and endpoint.configured() is None


def test_from_arguments_labelled_with_model_and_host():
    ep = endpoint.configure(["--endpoint", "http://gpu-box:8000", "--model", "llama-8b",
                             "--other", "x"])
    assert ep == endpoint.configured()
    assert ep.url == "http://gpu-box:8000/v1" and ep.model == "llama-8b"
    assert ep.label == "llama-8b at gpu-box:8000"


def test_from_the_environment(monkeypatch):
    monkeypatch.setenv(endpoint.ENV_URL, "https://serve.example.org/v1/")
    monkeypatch.setenv(endpoint.ENV_MODEL, "qwen")
    assert endpoint.configure([]).url == "https://serve.example.org/v1"


@pytest.mark.parametrize("argv, words", [
    (["--endpoint", "http://h:1"], "needs both a URL and a model"),
    (["--model", "m"], "needs both a URL and a model"),
    (["--endpoint", "gpu-box:8000", "--model", "m"], "base URL must look like http://host:port"),
    (["--endpoint", "file:///etc/passwd", "--model", "m"], "base URL must look like"),
    (["--endpoint", "http://h:1", "--model", " "], "needs a model name"),
])
def test_refused_in_words(argv, words):
    with pytest.raises(ConfigError, match=words):
        endpoint.configure(argv)


def test_where_a_job_measured():
    assert endpoint.measured_on({"url": "http://gpu-box:8000/v1", "model": "llama-8b"}) == \
        "llama-8b at gpu-box:8000, over HTTP"
    assert endpoint.measured_on({"preset": "tiny", "batch_size": 4}) is None


def test_the_about_page_links_the_servers_prometheus_metrics():
    point = endpoint.endpoint("http://gpu-box:8000/v1", "tiny")
    assert point.metrics_url == "http://gpu-box:8000/metrics"
    assert endpoint.endpoint("https://h:1", "m").metrics_url == "https://h:1/metrics"
    line = endpoint.metrics_html(point)
    assert '<a href="http://gpu-box:8000/metrics">' in line and "tiny at gpu-box:8000" in line
    none = endpoint.metrics_html(None)
    assert "/metrics" in none and "<a " not in none
