"""Predict, then measure: the reader commits to what they expect before the demo's first fresh
run, and the page then puts the prediction beside what was measured.

    box = PredictionBox(PredictionQuestion("Which clock will a long document move?",
                                           ("The first token's", "The gaps'", "Both")))
    box.param.watch(lambda e: ..., "made")      # True once the reader picked or skipped
    box.reveal("The first token's", "TTFT 840 ms against gaps of 31 ms")   # after measuring

A pick locks the choice (it is what the measurement is compared with); "Skip" opens the gate
without a prediction. A measurement revealed before either (a page that draws without the gate)
is kept and shown only once the gate opens, so the box never gives the answer away. Which choice
a measurement supports is the lesson's to say.
"""

from __future__ import annotations

import html

import panel as pn
import param

from .content import PredictionQuestion
from .site_css import site_stylesheets


def _html(body: str) -> pn.pane.HTML:
    return pn.pane.HTML(f'<div class="site">{body}</div>', sizing_mode="stretch_width",
                        stylesheets=site_stylesheets())


class PredictionBox(pn.viewable.Viewer):
    """The reader's prediction, and later the measurement beside it (module docstring)."""

    choice = param.Selector(default=None, allow_None=True, objects=[], doc="""
        The reader's prediction (one of the question's choices); None until they pick.""")
    skipped = param.Boolean(default=False, doc="The reader chose to run without predicting.")
    made = param.Boolean(default=False, constant=True, doc="""
        True once the reader predicted or skipped: the demo may then measure.""")

    def __init__(self, question: PredictionQuestion, **params):
        super().__init__(**params)
        self.question = question
        self.param.choice.objects = list(question.choices)
        self.measured: str | None = None
        self._locked: str | None = None  # the reader's pick, once made
        self._detail = ""
        self._picker = pn.widgets.RadioBoxGroup.from_param(
            self.param.choice, inline=False, sizing_mode="stretch_width")
        self._picker.value = None  # from_param preselects the first choice
        self._skip = pn.widgets.Button(label="Skip the prediction and measure",
                                       color="light", width=260)
        self._skip.on_click(lambda _e: self.skip())
        self._state = _html("")
        # the verdict in site colours (Bootstrap's info alert falls under 4.5:1 contrast here)
        self._result = _html("")
        self._result.visible = False
        self.outcome = ""  # "", "neutral", "right" or "wrong": how the verdict is drawn
        self._verdict = ""
        # called with (measured choice, detail) each time a measurement is put beside the pick
        self.shown_listeners: list = []
        self._note: pn.pane.HTML | None = None  # built at the first note: most pages have none
        self.note_text = ""  # the line under the pick ("" when there is none)
        self._layout = pn.Column(
            _html(f"<h2>Your prediction</h2><p>{html.escape(question.intro)}</p>"
                  f"<p><strong>{html.escape(question.prompt)}</strong></p>"),
            self._picker, self._skip, self._state, self._result,
            sizing_mode="stretch_width", css_classes=["prediction"])

    @param.depends("choice", watch=True)
    def _picked(self) -> None:
        if self.choice is None or self.choice == self._locked:
            return
        if self._locked is not None:  # a pick is final: it is what the measurement is compared with
            self.choice = self._locked
            return
        # the picker stays enabled (disabling it would drop a keyboard reader's focus on the page):
        # a later pick is undone above
        self._locked = self.choice
        self._skip.visible = False
        self._state.object = (f'<div class="site"><p>You predicted: <strong>'
                              f'{html.escape(self.choice)}</strong>. The demo below now measures '
                              "it.</p></div>")
        self._open()
        self._show()

    def skip(self) -> None:
        """Measure without a prediction."""
        if self.made:
            return
        self.skipped = True
        self._picker.disabled = True
        self._skip.visible = False
        self._state.object = '<div class="site"><p>No prediction: measuring.</p></div>'
        self._open()
        self._show()

    def _open(self) -> None:
        with param.edit_constant(self):
            self.made = True

    def reveal(self, measured: str, detail: str) -> None:
        """What the measurement says (one of the choices) and the numbers behind it."""
        if measured not in self.question.choices:
            raise ValueError(f"{measured!r} is not one of the prediction's choices")
        self.measured = measured
        self._detail = detail
        self._show()

    @property
    def detail(self) -> str:
        """The numbers behind the measured choice ("" before there is one)."""
        return self._detail

    @property
    def verdict(self) -> str:
        """The text shown beside the measurement ("" before there is one)."""
        return self._verdict if self._result.visible else ""

    def note(self, text: str) -> None:
        """A line under the pick (the class's picks, lessons.classroom.recording)."""
        self.note_text = text
        body = f'<div class="site"><p class="prediction-note">{html.escape(text)}</p></div>'
        if self._note is None:
            self._note = pn.pane.HTML(body, sizing_mode="stretch_width",
                                      stylesheets=site_stylesheets())
            self._layout.insert(self._layout.objects.index(self._state) + 1, self._note)
        else:
            self._note.object = body


    def _say(self, text: str, outcome: str) -> None:
        self._verdict, self.outcome = text, outcome
        self._result.object = (f'<div class="site"><p class="prediction-result {outcome}">'
                               f"{html.escape(text)}</p></div>")
        self._result.visible = True

    def _show(self) -> None:
        if self.measured is None or not self.made:
            return
        if self.choice is None:
            self._say(f"Measured: {self.measured} ({self._detail}).", "neutral")
        else:
            right = self.choice == self.measured
            verdict = "As you predicted." if right else "Not what you predicted."
            self._say(f"{verdict} You predicted: {self.choice}. Measured: {self.measured} "
                      f"({self._detail}).", "right" if right else "wrong")
        for listener in self.shown_listeners:
            listener(self.measured, self._detail)

    def __panel__(self):
        return self._layout
