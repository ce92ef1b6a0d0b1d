"""Plain-words descriptions of the engine service's state and of measured figures."""

from __future__ import annotations

import html

from engine.lab.cores import describe

HIDDEN_PARAMS = {"prompt"}  # a reader's own text is not shown to other readers


def describe_params(params: dict) -> str:
    shown = [f"{k} {v}" for k, v in params.items() if k not in HIDDEN_PARAMS and v is not None
             and k not in ("device", "backend", "random_weights")]
    return ", ".join(shown)


def describe_status(status: dict) -> str:
    """What the engine service is doing now, as a few lines of HTML."""
    lines = []
    if status.get("start_error"):
        lines.append(f"The engine could not start: {html.escape(status['start_error'])}")
    elif not status.get("ready"):
        lines.append("The engine worker is starting (loading torch and finding the device).")
    else:
        lines.append(f"Engine worker: process {status['worker_pid']} on "
                     f"{html.escape(status['device'])}, engine version "
                     f"{html.escape(status['engine_version'])}.")
        lines.append(describe_cores(status.get("cores"), status.get("threads")))
    running = status.get("running")
    if running:
        progress = running.get("progress") or {}
        steps = (f", {progress['done']} of {progress['total']} steps"
                 if progress.get("total") else "")
        params = describe_params(running.get("params") or {})
        lines.append(f"Now: running <b>{html.escape(running['kind'])}</b>"
                     f"{' (' + html.escape(params) + ')' if params else ''}{steps}, "
                     f"for {running['running_s']:.1f} s.")
    else:
        lines.append("Now: idle, waiting for a job.")
    queued = status.get("queued", 0)
    lines.append(f"Queued: {queued} job{'s' if queued != 1 else ''}.")
    lines.append(f"Done since the server started: {status.get('jobs_done', 0)} measured, "
                 f"{status.get('cache_hits', 0)} answered from the measurement cache "
                 f"({status.get('cache_entries', 0)} results in memory), "
                 f"{status.get('shared_runs', 0)} measured once for several readers at once.")
    lines.append(f"Cancelled: {status.get('jobs_cancelled', 0)} (their reader left or asked "
                 "for something else first).")
    lines.append(f"Disturbed: {status.get('disturbed', 0)} results (other work took the "
                 f"engine's core while it measured; never cached), {status.get('remeasured', 0)} "
                 f"of them measured again, {status.get('disturbed_final', 0)} left as they were "
                 "(other readers' jobs were waiting).")
    lines.append(f"Worker restarts: {status.get('restarts', 0)}.")
    memory = describe_memory(status.get("memory") or {})
    if memory:
        lines.append(memory)
    return "<ul>" + "".join(f"<li>{line}</li>" for line in lines) + "</ul>"


def describe_cores(split: dict | None, threads: int | None) -> str:
    """Where the engine measures: its cores and torch threads, and the web server's cores (the
    split of engine.lab.cores, set by ENGINE_CORES)."""
    if not split:
        return "Cores: not reported by the worker."
    threads_text = f" with {threads} torch thread{'s' if threads != 1 else ''}" if threads else ""
    if not split.get("isolated"):
        return (f"Cores: the engine and the web server share {describe(split['engine'])}"
                f"{threads_text} ({html.escape(split.get('note', ''))}).")
    return (f"Cores: the engine runs on {describe(split['engine'])}{threads_text}, the web "
            f"server on {describe(split['web'])}, so serving pages does not slow a measurement "
            f"({html.escape(split.get('note', ''))}).")


def describe_memory(memory: dict) -> str:
    """The memory the engine worker and the web process hold (resident, from /proc): the worker
    idle (when it last finished its jobs), now, and at its busiest so far."""
    worker, web = memory.get("worker"), memory.get("web")
    parts = []
    if worker:
        idle = worker.get("idle_mib")
        parts.append("Memory: the engine worker holds "
                     + (f"{idle:,.0f} MiB idle, " if idle is not None else "")
                     + f"{worker['rss_mib']:,.0f} MiB now and {worker['peak_mib']:,.0f} MiB at "
                     "its busiest so far (its models, their KV pools, sized to the jobs)")
    if web:
        parts.append(f"this web process {web['rss_mib']:,.0f} MiB (every reader's page)")
    return "; ".join(parts) + "." if parts else ""


def figure(value: str, what: str) -> str:
    return (f'<div class="figure"><div class="value">{html.escape(value)}</div>'
            f'<div class="what">{html.escape(what)}</div></div>')
