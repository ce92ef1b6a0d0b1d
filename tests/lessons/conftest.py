"""Component tests build Panel objects without a server or browser; each starts from a clean
pn.state (Panel's own test-suite habit), so one test's documents and caches never leak."""

import pytest
from helpers import reset_panel_state  # noqa: F401 (an autouse fixture)

from engine.lab import endpoint


@pytest.fixture
def endpoint_set(server, monkeypatch):
    """The teacher's endpoint: our own server, as `--args --endpoint URL --model M` sets it."""
    monkeypatch.delenv(endpoint.ENV_URL, raising=False)
    monkeypatch.delenv(endpoint.ENV_MODEL, raising=False)
    yield endpoint.configure(["--endpoint", server["url"], "--model", server["model"]])
    endpoint.configure([])
