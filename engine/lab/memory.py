"""How much memory a process holds, read from /proc (Linux; None elsewhere): what the about page
and /engine-status say about the web process and the engine worker. Torch-free."""

from __future__ import annotations

from pathlib import Path


def process_memory(pid: int | None) -> dict | None:
    """{"rss_mib": resident now, "peak_mib": the most it has been resident (VmHWM)}, or None
    when the process is gone or /proc has no such file."""
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    kib = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines)
           if k in ("VmRSS", "VmHWM") and v.split()}
    if "VmRSS" not in kib:
        return None
    return {"rss_mib": round(kib["VmRSS"] / 1024, 1),
            "peak_mib": round(kib.get("VmHWM", kib["VmRSS"]) / 1024, 1)}
