"""The engine check (app?page=engine-check): run one sweep point now and see it come back.

For a teacher before class (is the engine up, how fast is this machine), and for the browser
tests (two readers measuring at once). Its controls follow the URL like a lesson's:
app?page=engine-check&batch_size=8&fresh=true.
"""

from __future__ import annotations

import panel as pn
import param

from engine.lab.results import SweepPointResult
from widgets.html import html_pane, site_html

from .base import UrlPage


def result_rows(r: SweepPointResult) -> list[tuple[str, str]]:
    """(what, measured value with its unit) for the result table."""
    return [("TTFT (the batched prefill)", f"{r.ttft_ms:.1f} ms"),
            ("TPOT (median decode step)", f"{r.tpot_ms:.2f} ms"),
            ("Throughput, all sequences", f"{r.tokens_per_s:.0f} tokens/s"),
            ("Bytes read per second", f"{r.achieved_gbs:.1f} GB/s"),
            ("KV cache held", f"{r.kv_bytes:,} bytes")]


class EngineCheckPage(UrlPage):
    """One decode sweep point, measured by the engine service on demand."""

    preset = param.Selector(default="tiny", objects=["tiny", "small"], label="Model preset")
    batch_size = param.Integer(default=4, bounds=(1, 64), label="Batch size")
    prompt_len = param.Integer(default=64, bounds=(1, 1024), label="Prompt length (tokens)")
    new_tokens = param.Integer(default=16, bounds=(4, 1024), label="New tokens")
    fresh = param.Boolean(default=False, label="Measure again, even if cached")

    def __init__(self, **params):
        super().__init__(**params)
        self.result: SweepPointResult | None = None
        self._button = pn.widgets.Button(label="Measure", color="primary")
        self._button.on_click(lambda _event: self.measure())
        self._output = html_pane("", visible=False, css_classes=["engine-check-result"])
        controls = [pn.widgets.Select.from_param(self.param.preset),
                    pn.widgets.IntSlider.from_param(self.param.batch_size),
                    pn.widgets.IntSlider.from_param(self.param.prompt_len),
                    pn.widgets.IntSlider.from_param(self.param.new_tokens),
                    pn.widgets.Checkbox.from_param(self.param.fresh)]
        for widget in controls:
            widget.sizing_mode = "stretch_width"
        self._controls = controls

    def view(self) -> pn.viewable.Viewable:
        return pn.Column(
            html_pane("<h1>Engine check</h1><p>Prefill a batch of prompts, decode them together, "
                      "and time it: one point of lesson 4's curve. The worker runs it between "
                      "other readers' jobs.</p>"),
            self._notice_pane, *self._controls, self._button, self.runner.status, self._output,
            sizing_mode="stretch_width")

    def params_for_job(self) -> dict:
        return {"preset": self.preset, "batch_size": self.batch_size,
                "prompt_len": self.prompt_len, "new_tokens": self.new_tokens}

    def measure(self) -> None:
        self._button.disabled = True
        self.runner.submit("sweep_point", self.params_for_job(), self._on_event,
                           use_cache=not self.fresh)

    def _on_event(self, event) -> None:
        if event.final:
            self._button.disabled = False
        if event.type == "result":
            self.show_result(event.result)

    def show_result(self, result: SweepPointResult) -> None:
        self.result = result
        rows = "".join(f'<tr><th scope="row">{label}</th><td class="num">{value}</td></tr>'
                       for label, value in result_rows(result))
        caption = (f"Batch of {result.batch_size} on {result.device}, preset "
                   f"{result.preset} ({result.weights} weights)")
        self._output.param.update(
            object=site_html(f'<table class="plain"><caption>{caption}</caption>'
                             f"<tbody>{rows}</tbody></table>"), visible=True)
        self.say(f"{caption} measured: " + "; ".join(f"{label} {value}" for label, value
                                                      in result_rows(result)) + ".")
