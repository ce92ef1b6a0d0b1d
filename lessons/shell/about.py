"""About this machine: the device the engine runs on, its measured limits, the model presets,
the engine's first-start set-up (its C++ kernels and plans: engine.lab.setup_state) and what the
engine service is doing right now (both refreshed every second)."""

from __future__ import annotations

import html

import panel as pn

from engine.lab.endpoint import configured, metrics_html
from engine.lab.results import InfoResult, PresetShape
from engine.lab.setup_state import SetupState, read_state
from engine.lab.setup_state import describe as describe_setup
from widgets.html import html_pane, site_html
from widgets.job_status import RANDOM_WEIGHTS

from ..base import Page
from .status_text import describe_status, figure

STATUS_PERIOD_MS = 1000
LAB_METRICS_HTML = (
    '<p>Live metrics of this lab\'s own engine: <a href="metrics">/metrics</a>, in Prometheus\' '
    "text format, under vLLM's metric names where vLLM has one (requests running and waiting, "
    "KV-cache usage, time to first token, time between tokens, tokens generated) and with "
    "<code>lab_</code> in front for the service's own (jobs queued and completed, cache hits, "
    "restarts), so a Prometheus server or a vLLM dashboard can watch it. <code>python app.py"
    "</code> serves it, and <code>panel serve app.py --plugins lessons.shell.routes</code>.</p>")


def presets_table(presets: list[PresetShape]) -> str:
    head = ("Preset", "Parameters", "Layers", "Hidden", "Heads", "KV heads", "Head dim",
            "MLP", "Vocabulary", "Context", "Numbers", "KV bytes per token", "Weights")
    rows = []
    for p in presets:
        weights = "trained" if p.weights == "trained" else RANDOM_WEIGHTS
        cells = [f"{p.params / 1e6:.1f} M", p.layers, p.hidden, p.heads, p.kv_heads, p.head_dim,
                 p.intermediate, p.vocab, p.context]
        rows.append(
            f'<tr><th scope="row">{html.escape(p.name)}</th>'
            + "".join(f'<td class="num">{c}</td>' for c in cells)
            + f"<td>{html.escape(p.dtype)}</td>"
            + f'<td class="num">{p.kv_bytes_per_token:,}</td><td>{weights}</td></tr>')
    header = "".join(f'<th scope="col">{h}</th>' for h in head)
    return (f'<table class="plain"><caption>Model presets on this device</caption>'
            f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def figures_html(info: InfoResult) -> str:
    return '<div class="figures">' + "".join([
        figure(info.device_name, "device"),
        figure(str(info.threads), "threads the engine uses"),
        figure(f"{info.memory_bandwidth_gbs:.1f} GB/s", "measured memory read bandwidth"),
        figure(f"{info.matmul_gflops:.0f} GFLOP/s",
               f"measured {info.matmul_dtype} matrix-multiply peak"),
        figure(f"{info.ridge_flop_per_byte:.1f} FLOP/byte",
               "ridge point: below this arithmetic intensity, memory is the limit"),
        figure(f"torch {info.torch}", "the engine's tensor library"),
    ]) + "</div>"


def setup_html(state: SetupState) -> str:
    """The set-up's line, with a progress bar while it runs (plain HTML: the bar is a
    <progress> element, read by screen readers with its value)."""
    text = f"<p>{html.escape(describe_setup(state))}</p>"
    if state.state == "running" and state.total:
        text += (f'<progress max="{state.total}" value="{state.done}" '
                 f'aria-label="engine set-up">{state.done} of {state.total}</progress>')
    return text


class AboutPage(Page):
    """The machine and the engine service, as measured by the engine's "info" job."""

    def __init__(self, **params):
        super().__init__(**params)
        self.info: InfoResult | None = None
        self.figures = html_pane("<p>Measuring this machine's memory bandwidth and compute "
                                 "peak (a few seconds, the first time)...</p>",
                                 css_classes=["about-figures"])
        self.presets = html_pane("", visible=False)
        self.service = html_pane(describe_status(self.jobs.service.status()),
                                 css_classes=["service-status"])
        self.setup = html_pane(setup_html(read_state()), css_classes=["engine-setup"])

    def view(self) -> pn.viewable.Viewable:
        return pn.Column(
            html_pane("<h1>About this machine</h1><p>Every measurement in the lessons is made "
                      "here, on this device, by the engine's own worker process (figures quoted "
                      "from papers and datasheets are marked as quoted and name their source). "
                      "These are the limits it works against.</p>"),
            self.figures, self.runner.status, self.presets,
            html_pane("<h2>The engine's set-up</h2><p>The first time the app starts on a "
                      "machine, the engine builds its C++ kernels and times how to multiply "
                      "its models' weights here, in the background; results measured before "
                      "that is done are labelled as the plain path's.</p>"),
            self.setup,
            html_pane("<h2>The engine service, now</h2><p>One worker process runs every "
                      "reader's measurements, one at a time: short measurements before long "
                      "runs, readers in turn, the same measurement asked by several readers run "
                      "once; results are kept, so a point measured once is shown to everyone. "
                      'For a quick test of the engine, run the <a href="app?page=engine-check">'
                      "engine check</a>.</p>"),
            self.service, html_pane(LAB_METRICS_HTML),
            html_pane(metrics_html(configured())), sizing_mode="stretch_width")

    def start(self) -> None:
        """Ask the engine for the machine's description; refresh the service line periodically."""
        self.runner.submit("info", {}, self._on_event)
        if self.jobs.served:
            pn.state.add_periodic_callback(self.refresh_status, period=STATUS_PERIOD_MS)

    def refresh_status(self) -> None:
        self.service.object = site_html(describe_status(self.jobs.service.status()))
        setup = site_html(setup_html(read_state()))
        if self.setup.object != setup:
            self.setup.object = setup

    def _on_event(self, event) -> None:
        if event.type == "result":
            self.show_info(event.result)
        elif event.type == "error":
            self.figures.object = site_html("<p>No measurements to show.</p>")

    def show_info(self, info: InfoResult) -> None:
        self.info = info
        self.figures.object = site_html(figures_html(info))
        self.presets.param.update(object=site_html(presets_table(info.presets)), visible=True)
