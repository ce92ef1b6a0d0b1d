"""A small, real LLM inference engine (torch): paged KV cache, batching policies, a real-time
serving loop, and the measurement service the course's pages run on.

The public API, importable from here:

    from engine import EngineConfig, LLMEngine, generate
    engine = LLMEngine(EngineConfig(preset="tiny"))
    [result] = generate(engine, [engine.tokenizer.encode("A list is")], max_new_tokens=16)

Names are imported on first use (PEP 562), so `import engine.config` or `import engine.calc`
does not load torch: the web process imports those torch-free parts (config, errors, paths,
calc, and the lab's client side) and never the rest.

`generate` and `sweep` name both a module and its main function; the package's attribute is the
function (`from engine import sweep` is the function, `from engine.sweep import ...` the module's
contents), even after the module was imported.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = [
    "ENGINE_VERSION", "PRESETS", "ConfigError", "EngineConfig", "LLMEngine", "ModelConfig",
    "Request", "RunResult", "SamplingParams", "SchedulerConfig", "SpeculativeDecoder",
    "WorkloadSpec", "compute_metrics", "generate", "get_preset", "make_draft", "make_workload",
    "measure_point", "run", "sweep",
]
_HOME = {  # where each public name is defined
    "engine.config": ("EngineConfig", "ModelConfig", "PRESETS", "get_preset"),
    "engine.errors": ("ConfigError",),
    "engine.llm_engine": ("LLMEngine", "ENGINE_VERSION"),
    "engine.sampler": ("SamplingParams",),
    "engine.scheduler": ("SchedulerConfig",),
    "engine.generate": ("generate",),
    "engine.speculative": ("SpeculativeDecoder", "make_draft"),
    "engine.sweep": ("sweep", "measure_point"),
    "engine.serve.loop": ("run", "RunResult"),
    "engine.serve.workload": ("Request", "WorkloadSpec", "make_workload"),
    "engine.serve.metrics": ("compute_metrics",),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}


def __getattr__(name: str) -> Any:
    try:
        module = _MODULE_OF[name]
    except KeyError:
        raise AttributeError(f"module 'engine' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Importing engine.generate or engine.sweep makes Python set the package's attribute of
    that name to the module; keep the public function there instead (sys.modules still holds
    the module for `from engine.sweep import ...`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _MODULE_OF and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
