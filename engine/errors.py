"""The errors a user can cause, apart from bugs: catch them by type (isinstance), never by name.

Torch-free, so the web process can recognise them too. A ConfigError's message is meant for the
reader as it is: one line that names the limit (the CLI prints it after "error:", the engine
service sends it as a job's error, a page shows it).
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting a user chose is outside what the engine supports; the message names the limit."""


class ResultError(ValueError):
    """A job's result does not have the shape of its record (engine.lab.results): a stale cache
    file or a body that changed without its record. The message names the field."""
