"""The closed-loop capacity search of the SLO lesson (lessons/slo_goodput.py): how many users
this machine holds within a P95 TTFT and a per-user token rate (`capacity_search`, engine.lab),
each load judged on the requests of all its runs, with its table and download.
"""

from __future__ import annotations

import panel as pn
import param

from engine.calc.rate_sweep import OUTPUT_LEN, PROMPT_LEN
from engine.calc.stats import Estimate, min_samples
from engine.lab.results import CapacityLoad, CapacitySearchResult
from widgets.data_download import DataDownload
from widgets.job_status import JobStatus
from widgets.tables import UNBOUNDED, html_table, interval_text, sig, table_pane, with_interval

from .data_record import result_header
from .job_runner import JobRunner, event_record


def capacity_ttft(load: CapacityLoad) -> str:
    """A load's P95 TTFT with its 95% interval, † when its requests cannot bound a P95 (a load
    whose record carries no request count shows the figure alone)."""
    if load.requests is None:
        return sig(load.ttft_p95_ms)
    return with_interval(load.ttft_p95_ms, Estimate(
        "P95", load.ttft_p95_ms, load.ttft_ci_lo, load.ttft_ci_hi, load.requests,
        bool(load.ttft_bounded)))


class CapacitySearch(param.Parameterized):
    """Mixed into a lesson (before LessonPage) that has a `max_batch`: the search's targets as
    parameters a URL may set, its own runner and status, `search_capacity()` on the button, and
    `capacity_widgets()` for the page."""

    cap_ttft_ms = param.Number(default=1000.0, bounds=(1.0, 600_000.0),
                               label="Capacity: P95 TTFT at most (ms)")
    cap_tok_s = param.Number(default=20.0, bounds=(0.0, 100_000.0),
                             label="Capacity: tokens/s each user at least")
    max_users = param.Integer(default=32, bounds=(1, 64), label="Capacity: most users to try")

    def __init__(self, **params):
        super().__init__(**params)
        self.capacity_runner = JobRunner(self, JobStatus("capacity searches"))
        self.capacity: CapacitySearchResult | None = None
        self.capacity_event = None
        self.cap_loads: list[CapacityLoad] = []
        self.find = pn.widgets.Button(label="Find how many users this machine holds",
                                      color="primary")
        self.find.on_click(lambda _e: self.search_capacity())
        self.verdict = pn.pane.Markdown("", sizing_mode="stretch_width", css_classes=["verdict"])
        self.cap_table = table_pane(css_classes=["capacity-table"])
        self.cap_download = DataDownload("capacity-search", self.capacity_rows,
                                         self.capacity_header, "The loads the search measured")

    def capacity_params(self) -> dict:
        return {"ttft_p95_ms": float(self.cap_ttft_ms), "per_user_tok_s": float(self.cap_tok_s),
                "max_users": int(self.max_users), "repeats": 3, "requests_per_user": 2,
                "per_doubling": 4,
                "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN,
                "max_batch": int(self.max_batch)}

    def search_capacity(self) -> None:
        self.capacity, self.capacity_event, self.cap_loads = None, None, []
        self.verdict.object = "*Searching: a load near the targets runs up to three times...*"
        self._refresh_capacity()

        def on_event(event):
            if event.type == "step" and event.data.get("kind") == "capacity_load":
                self.cap_loads.append(event_record(CapacityLoad, event.data))
                self._refresh_capacity()
            elif event.type == "result":
                self.show_capacity(event.result, event)

        self.capacity_runner.submit("capacity_search", self.capacity_params(), on_event)

    def show_capacity(self, result: CapacitySearchResult, event=None) -> None:
        self.capacity, self.capacity_event = result, event
        self.cap_loads = list(result.loads)
        again = (f", {result.disturbed_reruns} of them again after a disturbed run"
                 if result.disturbed_reruns else "")
        self.verdict.object = (f"**{result.verdict}** (closed-loop load, batches of up to "
                               f"{result.max_batch}; {result.trials_run} runs in all{again}.)")
        self._refresh_capacity()

    def _refresh_capacity(self) -> None:
        loads = sorted(self.cap_loads, key=lambda load: load.users)
        self.cap_table.object = html_table(
            "Each load the search measured, judged on the requests of all its runs: P95 TTFT "
            f"and tokens/s each user (1000 / the median request's TPOT), each with its 95% "
            f"interval [low–high]; {UNBOUNDED} too few requests to bound a P95 (needs "
            f"{min_samples(95)})",
            ["users", "P95 TTFT (ms)", "tokens/s each user", "median queue wait (ms)",
             "preemptions", "runs", "requests", "met both targets"],
            [[f"{load.users}", capacity_ttft(load),
              interval_text(load.per_user_tok_s, load.per_user_ci_lo, load.per_user_ci_hi),
              sig(load.queue_ms), f"{load.preemptions}", f"{len(load.trials)}",
              "-" if load.requests is None else f"{load.requests}",
              "yes" if load.met else "no"] for load in loads],
            numeric=[False, True, True, True, True, True, True, False]) if loads else ""

    def capacity_rows(self) -> list[dict]:
        """Every run of every load (each run's own figures), with its load's pooled figures."""
        pooled = ("ttft_p95_ms", "ttft_ci_lo", "ttft_ci_hi", "requests", "ttft_bounded",
                  "per_user_tok_s", "per_user_ci_lo", "per_user_ci_hi")
        return [{"users": load.users, "run": i + 1, **t.to_dict(),
                 **{f"load_{k}": getattr(load, k) for k in pooled}, "load_met_targets": load.met}
                for load in sorted(self.cap_loads, key=lambda load: load.users)
                for i, t in enumerate(load.trials)]

    def capacity_header(self) -> dict:
        result = self.capacity
        return result_header(self, "capacity_search", self.capacity_params(), result,
                             self.capacity_event, "search",
                             verdict=result.verdict if result else "")

    def capacity_widgets(self) -> list:
        """The search's targets, its button, its status, verdict, table and download."""
        return [pn.Row(pn.widgets.FloatInput.from_param(self.param.cap_ttft_ms, step=100,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.FloatInput.from_param(self.param.cap_tok_s, step=5,
                                                        sizing_mode="stretch_width"),
                       pn.widgets.IntSlider.from_param(self.param.max_users, throttled=True,
                                                       sizing_mode="stretch_width"),
                       sizing_mode="stretch_width"),
                self.find, self.capacity_runner.status, self.verdict, self.cap_table,
                self.cap_download]
