"""The prediction and the checkpoint as plain HTML for a page saved to a file (lessons.export).

In the app both are Panel widgets whose feedback comes from Python on the server; a file opened
from disk has no server. Here each question is a group of radio buttons, and each choice's feedback
sits in the same fieldset, hidden until that choice is checked: a CSS rule per choice
(`fieldset:has(#id:checked) .why-id`) shows it. No script runs, so nothing can fail to load, and
the browser's own radio buttons keep the keyboard and screen-reader behaviour. The feedback is a
polite live region, so a screen reader reads it when it appears.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from .checkpoint import Question, choice_order

_STYLE = """<style>
.static-choice { border: 1px solid var(--rule, #ccc); border-radius: 6px; padding: 0.6em 1em;
  margin: 0.8em 0; }
.static-choice legend { font-weight: 600; padding: 0 0.3em; }
.static-choice .choice { margin: 0.25em 0; }
.static-choice .why { display: none; margin: 0.5em 0 0; padding: 0.4em 0.7em;
  border-left: 4px solid var(--accent, #36c); }
</style>"""


def choice_group(group_id: str, prompt: str, choices: Sequence[tuple[str, str]]) -> str:
    """One fieldset: the prompt, a radio button per (choice text, feedback) and the feedback
    shown when that choice is checked. Texts are escaped here; ids must be unique in the pane."""
    inputs, whys, rules = [], [], []
    for i, (text, why) in enumerate(choices):
        cid = f"{group_id}-{i}"
        inputs.append(f'<div class="choice"><input type="radio" name="{group_id}" id="{cid}">'
                      f' <label for="{cid}">{html.escape(text)}</label></div>')
        whys.append(f'<p class="why why-{cid}" role="status">{html.escape(why)}</p>')
        rules.append(f"fieldset:has(#{cid}:checked) .why-{cid} {{ display: block; }}")
    return (f'<style>{" ".join(rules)}</style><fieldset class="static-choice" id="{group_id}">'
            f"<legend>{html.escape(prompt)}</legend>{''.join(inputs)}{''.join(whys)}</fieldset>")


def static_checkpoint(questions: Sequence[Question], seed: int = 0,
                      title: str = "Checkpoint") -> str:
    """The checkpoint's questions (choices in the reader-seeded order the app uses), each
    answering a pick with "Right." or "Not quite." and why."""
    groups = []
    for n, q in enumerate(questions):
        shown = [q.choices[i] for i in choice_order(q, seed)]
        groups.append(choice_group(f"q{n}", q.prompt, [
            (c.text, f"{'Right.' if c.correct else 'Not quite.'} {c.why}") for c in shown]))
    return (f'{_STYLE}<section class="checkpoint"><h2>{html.escape(title)}</h2>'
            f"{''.join(groups)}</section>")


def static_prediction(prompt: str, choices: Sequence[str], measured: str | None,
                      detail: str, intro: str = "") -> str:
    """The prediction: pick a choice, then read what the recorded measurement says beside it.
    Without a measurement the choices still show, with a note that nothing was measured."""
    def verdict(choice: str) -> str:
        if measured is None:
            return "Nothing was measured for this copy: run the live app to compare."
        said = "As you predicted." if choice == measured else "Not what you predicted."
        return f"{said} You predicted: {choice}. Measured: {measured} ({detail})."

    lead = f"<p>{html.escape(intro)}</p>" if intro else ""
    return (f'{_STYLE}<section class="prediction"><h2>Your prediction</h2>{lead}'
            f"{choice_group('prediction', prompt, [(c, verdict(c)) for c in choices])}</section>")
