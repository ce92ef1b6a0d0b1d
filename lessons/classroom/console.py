"""The teacher's console, /app?page=class: start and stop the class run, change its knobs while
it runs, and watch the class's own load live (lessons.classroom.live draws it); below, the
class's predictions beside what was measured (lessons.classroom.predictions) and, for the
teacher, the class's anonymous aggregate as CSV.

Anyone may open the console and watch; its controls need the teacher's key
(lessons.classroom.teacher_key), entered once here and kept in a cookie. Without it the controls
are disabled and a line says why. Each change is checked again against the key when it is made,
so a page left open after the key changes cannot change the run.
"""

from __future__ import annotations

import asyncio
import html
import logging
from urllib.parse import unquote

import panel as pn
import param

from engine.errors import ConfigError
from widgets.html import html_pane, site_html

from . import teacher_key
from .feed import describe_change
from .live import LiveClass, served
from .predictions import aggregate_download, class_predictions_view

log = logging.getLogger(__name__)

POLICIES = ["continuous", "dynamic", "static"]
READ_ONLY = ("Read-only: the controls need the teacher's key (the server printed it as "
             "“Teacher key: ...” when it started).")
UNLOCKED = "The controls are yours: this browser holds the teacher's key."
# Sets the key's cookie in this browser (path /, this site only), from the key field.
SET_COOKIE_JS = f"""
const key = field.value_input || field.value;
document.cookie = '{teacher_key.COOKIE}=' + encodeURIComponent(key || '') +
  '; path=/; max-age=43200; SameSite=Strict';
"""


def knob_values(settings: dict) -> dict:
    """The knobs' values from a run's settings (defaults where it has none)."""
    return {"policy": settings.get("policy", "continuous"),
            "max_batch": int(settings.get("max_batch", 16)),
            "chunked": bool(settings.get("chunk_size", 0)),
            "chunk_size": int(settings.get("chunk_size") or 64),
            "prefix_cache": bool(settings.get("prefix_cache", False)),
            "background_rps": float(settings.get("background_rps", 0.0)),
            "lanes": bool(settings.get("lanes", False))}


def knob_changes(settings: dict, wanted: dict) -> dict:
    """The class_set changes that take the run from `settings` to the knobs' `wanted` values."""
    now = knob_values(settings)
    out: dict = {}
    for name in ("policy", "max_batch", "prefix_cache", "background_rps", "lanes"):
        if wanted[name] != now[name]:
            out[name] = wanted[name]
    chunk = wanted["chunk_size"] if wanted["chunked"] else 0
    if chunk != (now["chunk_size"] if now["chunked"] else 0):
        out["chunk_size"] = chunk
    return out


class ClassConsole(pn.viewable.Viewer):
    """The teacher's console: key, start/stop, knobs, and the class run's live charts."""

    policy = param.Selector(default="continuous", objects=POLICIES, doc="Scheduling policy.")
    max_batch = param.Integer(default=16, bounds=(1, 256), doc="Most requests in one step.")
    chunked = param.Boolean(default=False, doc="Chunked prefill on.")
    chunk_size = param.Integer(default=64, bounds=(8, 4096), doc="Prefill tokens per step.")
    prefix_cache = param.Boolean(default=False, doc="Prefix cache on.")
    background_rps = param.Number(default=0.0, bounds=(0.0, 50.0), step=0.5,
                                  doc="Synthetic requests per second.")
    lanes = param.Boolean(default=False, doc="Students' requests in a lane ahead of the "
                          "background load's, which holds at most half the slots.")
    unlocked = param.Boolean(default=False, doc="This session holds the teacher's key.")

    def __init__(self, service=None, feed=None, key: str | None = None, **params):
        super().__init__(**params)
        self.live = LiveClass(service=service, feed=feed, full=True, on_frame=self.on_frame)
        self._key = key if key is not None else _cookie_key()
        self.key_field = pn.widgets.PasswordInput(label="Teacher's key", placeholder="the key",
                                                  width=220)
        self.key_button = pn.widgets.Button(label="Use this key", color="default")
        self.key_button.js_on_click(args={"field": self.key_field}, code=SET_COOKIE_JS)
        self.key_button.on_click(self._enter_key)
        self.access = html_pane("", css_classes=["class-access"])
        self.start_button = pn.widgets.Button(label="Start the class run", color="primary")
        self.stop_button = pn.widgets.Button(label="Stop the class run", color="warning")
        self.apply_button = pn.widgets.Button(label="Apply the knobs", color="primary")
        self.start_button.on_click(lambda _e: self.start_run())
        self.stop_button.on_click(self._stop_clicked)
        self.apply_button.on_click(lambda _e: self.apply_knobs())
        self.knob_widgets = [
            pn.widgets.Select.from_param(self.param.policy, label="Scheduling policy"),
            pn.widgets.IntInput.from_param(self.param.max_batch, label="Max batch (requests)"),
            pn.widgets.Checkbox.from_param(self.param.chunked, label="Chunked prefill"),
            pn.widgets.IntInput.from_param(self.param.chunk_size,
                                           label="Prefill budget (tokens a step)"),
            pn.widgets.Checkbox.from_param(self.param.prefix_cache, label="Prefix cache"),
            pn.widgets.FloatInput.from_param(self.param.background_rps,
                                             label="Background load (requests/s)", step=0.5),
            pn.widgets.Checkbox.from_param(self.param.lanes,
                                           label="Lanes: students before the background load"),
        ]
        self.status = html_pane("", css_classes=["class-status"])
        self.message = html_pane("", css_classes=["class-message"])
        self.changes = html_pane("", css_classes=["class-changes"])
        # the class's predictions beside what was measured (lessons.classroom.predictions);
        # the anonymous aggregate's download is the teacher's
        self.aggregate = aggregate_download()
        self.predictions_slot = pn.Column(class_predictions_view(), self.aggregate,
                                          sizing_mode="stretch_width")
        self._synced_run = None
        self.unlocked = teacher_key.key_ok(self._key)
        self._show_access()
        self.on_frame()

    # ---- who may do what -------------------------------------------------------------------
    def _enter_key(self, _event=None) -> None:
        self._key = self.key_field.value_input or self.key_field.value
        self.unlocked = teacher_key.key_ok(self._key)
        if not self.unlocked:
            teacher_key.log_refusal("unlocking the console", "the console page")
        self._say("The key is accepted." if self.unlocked else "That is not the teacher's key.")
        self._show_access()

    def _allowed(self, what: str) -> bool:
        if teacher_key.key_ok(self._key):
            return True
        teacher_key.log_refusal(what, "the console page")
        self._say(f"Not done: {what} needs the teacher's key.")
        return False

    @param.depends("unlocked", watch=True)
    def _show_access(self) -> None:
        line = UNLOCKED if self.unlocked else READ_ONLY
        self.access.object = site_html(f"<p>{html.escape(line, quote=False)}</p>")
        for w in [self.start_button, self.stop_button, self.apply_button, self.aggregate,
                  *self.knob_widgets]:
            w.disabled = not self.unlocked

    # ---- actions ---------------------------------------------------------------------------
    def start_run(self) -> dict | None:
        """Start the class run with the knobs' values (or show the live one's)."""
        if not self._allowed("starting the class run"):
            return None
        wanted = self.param.values()
        settings = {"policy": wanted["policy"], "max_batch": wanted["max_batch"],
                    "chunk_size": wanted["chunk_size"] if wanted["chunked"] else 0,
                    "prefix_cache": wanted["prefix_cache"],
                    "background_rps": wanted["background_rps"], "lanes": wanted["lanes"]}
        try:
            settings = self.live.service.class_start(settings)
        except ConfigError as e:
            self._say(f"Not started: {e}")
            return None
        log.info("class run started from the console: %s", settings)
        self._say("The class run is live. Students join it at /app?page=class-student.")
        self.live.tick_now()
        return settings

    async def _stop_clicked(self, _event=None) -> None:
        """Stopping waits for the run's summary (seconds): off the session's event loop."""
        if not self._allowed("stopping the class run"):
            return
        self._say("Stopping the class run...")
        summary = await asyncio.to_thread(self.live.service.class_stop)
        self._stopped(summary)

    def stop_run(self) -> dict | None:
        """Stop the class run and wait for its summary (tests and scripts; the button does
        the same off the event loop)."""
        if not self._allowed("stopping the class run"):
            return None
        summary = self.live.service.class_stop()
        self._stopped(summary)
        return summary

    def _stopped(self, summary: dict | None) -> None:
        self._say("The class run is stopped." if summary is not None
                  else "No class run was live.")
        self.live.tick_now()

    def apply_knobs(self) -> dict | None:
        """Send the knobs that differ from the run's settings; the change applies from the
        engine's next step and is marked on every chart."""
        if not self._allowed("changing a knob"):
            return None
        changes = knob_changes(self.live.feed.settings, self.param.values())
        if not changes:
            self._say("The knobs already have these values.")
            return None
        try:
            applied = self.live.service.class_set(changes, by="teacher")
        except ConfigError as e:
            self._say(f"Not changed: {e}")
            return None
        log.info("class run knobs changed from the console: %s", applied)
        self._say(f"Changed: {describe_change(applied.get('applied') or changes)}, "
                  f"from {float(applied.get('t_s') or 0):.1f} s of run time.")
        self.live.tick_now()
        return applied

    def _say(self, text: str) -> None:
        self.message.object = site_html(f'<p role="status">{html.escape(text, quote=False)}</p>')

    # ---- each frame ------------------------------------------------------------------------
    def on_frame(self) -> None:
        feed = self.live.feed
        g = feed.gauges
        if feed.active:
            line = (f"Live for {feed.t_s:.0f} s: {int(g['in_flight'])} requests in flight, "
                    f"{int(g['waiting'])} waiting, {float(g['tokens_per_s']):.0f} tokens/s, "
                    f"KV blocks {int(g['kv_blocks_used'])} of {int(g['kv_blocks_total'])}.")
        else:
            line = "No class run is live." + (
                " The charts show the last one." if feed.steps or feed.requests else "")
        if feed.active and not feed.ready:
            line = "The class run is starting: the engine is getting ready."
        if feed.run_error:
            line += f" The class run reports: {feed.run_error}"
        if feed.error:
            line += f" The engine did not answer: {feed.error}"
        self.status.object = site_html(f"<p>{html.escape(line, quote=False)}</p>")
        if feed.active and feed.run != self._synced_run and feed.settings:
            self._synced_run = feed.run  # the knobs start at the live run's values
            self.param.update(**knob_values(feed.settings))
        changes = feed.changes()
        items = "".join(
            f"<li>{c['t_s']:.1f} s: {html.escape(describe_change(c.get('changes') or {}), False)}"
            f" (by {html.escape(str(c.get('by', 'teacher')), False)})</li>" for c in changes)
        self.changes.object = site_html(
            f"<h2>Knob changes</h2><ul>{items}</ul>" if items
            else "<h2>Knob changes</h2><p>None yet.</p>")

    def start(self) -> None:
        self.live.start_frames()

    def __panel__(self):
        if served():
            pn.state.onload(self.start)
        return pn.Column(
            html_pane("<h1>The class run: teacher's console</h1><p>One engine run that every "
                      "student's requests join: start it, let the class send prompts from "
                      '<a href="app?page=class-student">the student page</a>, and change the '
                      "knobs while it runs. Each change is marked on every chart's time axis "
                      "and shown on the students' pages.</p>"),
            self.access, pn.Row(self.key_field, self.key_button),
            self.status, pn.Row(self.start_button, self.stop_button), self.message,
            html_pane("<h2>Knobs</h2><p>They apply from the engine's next step. Lanes need "
                      "the continuous policy.</p>"),
            pn.Row(*self.knob_widgets[:3]), pn.Row(*self.knob_widgets[3:]), self.apply_button,
            self.changes, self.live, self.predictions_slot,
            sizing_mode="stretch_width")


def _cookie_key() -> str | None:
    """The teacher's key from this session's cookie, if it has one."""
    try:
        value = (pn.state.cookies or {}).get(teacher_key.COOKIE)
    except Exception:  # outside a served session there are no cookies
        return None
    return unquote(value) if value else None
