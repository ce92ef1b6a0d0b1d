"""Component tests build Panel objects without a server or browser; each starts from a clean
pn.state (Panel's own test-suite habit), so one test's documents and caches never leak."""

from helpers import reset_panel_state  # noqa: F401 (an autouse fixture)
