"""Component tests build Panel objects without a server or browser; each starts from a clean
pn.state (Panel's own test-suite habit), so one test's documents and caches never leak."""

import panel as pn
import pytest


@pytest.fixture(autouse=True)
def reset_panel_state():
    yield
    pn.state.reset()
    pn.state.clear_caches()
