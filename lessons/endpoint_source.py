"""The source choice of the lessons that can measure the teacher's OpenAI-compatible server
(engine.lab.endpoint) as well as the built-in engine.

A `source` parameter that a URL may set (`&source=endpoint`), honoured only when the teacher
configured an endpoint: the URL picks between the two servers, it never names one. The choice is
shown as two buttons, the second labelled with the endpoint's model and host, as every figure
measured there is.
"""

from __future__ import annotations

import panel as pn
import param

from engine.lab.endpoint import Endpoint, configured


class EndpointSource(param.Parameterized):
    """Mixed into a lesson (before LessonPage): `source`, `endpoint`, `measures_endpoint`."""

    source = param.Selector(default="engine", objects=["engine", "endpoint"],
                            label="Server to measure")

    def __init__(self, **params):
        super().__init__(**params)
        self.endpoint: Endpoint | None = configured()
        self._keep_source_real()

    @property
    def measures_endpoint(self) -> bool:
        return self.source == "endpoint" and self.endpoint is not None

    @param.depends("source", watch=True)
    def _keep_source_real(self) -> None:
        if self.endpoint is None and self.source != "engine":
            self.source = "engine"  # nothing else to measure: a URL's source=endpoint is moot

    def source_widgets(self) -> list:
        """The choice, or nothing when there is no endpoint to choose."""
        if self.endpoint is None:
            return []
        return [pn.widgets.RadioButtonGroup.from_param(
            self.param.source, options={"Built-in engine": "engine",
                                        self.endpoint.label: "endpoint"},
            sizing_mode="stretch_width")]


def endpoint_label(base_url: str, model: str) -> str:
    """'<model> at <host>' for a result measured at an endpoint."""
    return Endpoint(base_url, model).label
