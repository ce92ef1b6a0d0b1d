"""Bokeh's property defaults, looked up once per model class instead of on every read. Patches
Bokeh's PropertyDescriptor._get_default and HasProps._overridden_defaults.

Why: building a lesson page makes a few hundred Bokeh models, and Bokeh reads each unset
property's default from scratch on every access: it merges the class's overridden defaults along
the whole MRO into a new dict, copies the default and validates it again
(core.property.descriptors.PropertyDescriptor._get_default). Creating the models, Panel's
updates and serializing the page read those defaults thousands of times a page, a large share of
a page's build and send on the web server's one core, which a class arriving at once queues
behind (bench/web/page_build.py measures it; docs/decisions/web-runtime-patches.md).

`cache_stable_defaults()` keeps, per model class, the default of each property whose default is
the same immutable value for every instance (None, a bool, a number, a string, or a tuple of
those) and that no theme overrides for the instance. Everything else (a list, a dict, a model
made on demand, a themed value) still goes through Bokeh's own lookup, so no two models ever
share a value one of them could change. The serialized page is byte for byte the same
(tests/widgets/runtime/test_bokeh_defaults.py).
"""

from __future__ import annotations

from typing import Any

from bokeh.core.has_props import HasProps
from bokeh.core.property.descriptors import PropertyDescriptor

_IMMUTABLE = (type(None), bool, int, float, str)
CACHE = "_llm_speed_stable_defaults"  # per class, in the class's own __dict__ (not inherited)
_MERGED = "_llm_speed_overridden_defaults"  # per class: its MRO's overridden defaults, merged
BOKEH_GET_DEFAULT = PropertyDescriptor._get_default
BOKEH_OVERRIDDEN_DEFAULTS = HasProps._overridden_defaults.__func__


def _immutable(value: Any) -> bool:
    if type(value) is tuple:
        return all(_immutable(v) for v in value)
    return type(value) in _IMMUTABLE


def _get_default(self: PropertyDescriptor, obj: HasProps) -> Any:
    """PropertyDescriptor._get_default, answered from the class's cache where that is safe."""
    if getattr(obj, "__themed_values__", None) is not None:  # a theme's: per instance
        return BOKEH_GET_DEFAULT(self, obj)
    cls = type(obj)
    cache = cls.__dict__.get(CACHE)
    if cache is None:
        cache = {}
        setattr(cls, CACHE, cache)
    hit = cache.get(self.name)
    if hit is not None:
        return hit[0]
    default = BOKEH_GET_DEFAULT(self, obj)
    if _immutable(default) and not self.has_unstable_default(obj):
        cache[self.name] = (default,)
    return default


def _overridden_defaults(cls: type[HasProps]) -> dict[str, Any]:
    """HasProps._overridden_defaults, merged once per class: Bokeh merges the MRO's
    `__overridden_defaults__` into a new dict on each default it looks up. Each class's own
    `__overridden_defaults__` is set as the class is made and never changes after."""
    merged = cls.__dict__.get(_MERGED)
    if merged is None:
        merged = BOKEH_OVERRIDDEN_DEFAULTS(cls)
        setattr(cls, _MERGED, merged)
    return merged


def cache_stable_defaults() -> None:
    """Install the caches for this process (idempotent; widgets.runtime.install does, before
    any page is built)."""
    PropertyDescriptor._get_default = _get_default
    HasProps._overridden_defaults = classmethod(_overridden_defaults)


def installed() -> bool:
    """True while the caches answer for Bokeh's lookups."""
    return PropertyDescriptor._get_default is _get_default


def uninstall() -> None:
    """Bokeh's own lookups again (the tests compare the two)."""
    PropertyDescriptor._get_default = BOKEH_GET_DEFAULT
    HasProps._overridden_defaults = classmethod(BOKEH_OVERRIDDEN_DEFAULTS)
