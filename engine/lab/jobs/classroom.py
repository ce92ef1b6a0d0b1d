"""The class run as a lab job (engine.serve.class_run): it serves the class until the teacher
stops it. Its messages (students' requests, knob changes, stop) come from the service through
its Control's inbox (engine.lab.worker: the job pipe, read between two steps); what happens
goes back as one "class" event per turn of its loop; its result is the run's summary. Idle
gaps (nothing in the engine, nothing waiting) are lent to other readers' short jobs through
the Control's fill, as a serving run's are.
"""

from __future__ import annotations

from ...errors import ConfigError
from ...serve.class_knobs import ClassSettings
from ...serve.class_run import ClassRun
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params, fit_kv

KV_REQUESTS = 32  # the KV pool holds at least this many requests of the longest size at once


def class_run_job(params: dict, emit: Emit, control: Control) -> dict | None:
    engine = engine_from_params(params)
    settings = ClassSettings.of(params)
    longest = settings.max_prompt_tokens + settings.max_tokens
    context = engine.model_config.context
    if longest > context:
        raise ConfigError(f"prompts of {settings.max_prompt_tokens} tokens plus "
                          f"{settings.max_tokens} new tokens exceed the {params['preset']} "
                          f"context of {context} positions")
    fit_kv(engine, [longest] * max(settings.max_batch, KV_REQUESTS))
    run = ClassRun(engine, settings, lambda batch: emit("class", batch), seed=params["seed"])
    return run.run(control.inbox, control.cancelled, control.fill)
