"""Where the engine keeps what it measures once per machine (hardware limits, cached results)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    """$LLM_SPEED_CACHE, else ~/.cache/llm-serving-speed; created on first use."""
    path = Path(os.environ.get("LLM_SPEED_CACHE", Path.home() / ".cache" / "llm-serving-speed"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json_atomic(path: Path, data) -> None:
    """Write to a temporary file beside path, then rename: readers never see half a file."""
    write_text_atomic(path, json.dumps(data))


def write_text_atomic(path: Path, text: str) -> None:
    """write_json_atomic for text already made (the result cache sizes entries by it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
