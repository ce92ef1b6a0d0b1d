"""URL query arguments set a page's parameters: numbers clamped to their bounds, unknown choices
refused, each change announced in a notice."""

from __future__ import annotations

import param
import pytest

from lessons.url_state import apply_query_args, parse_value


class Controls(param.Parameterized):
    batch_size = param.Integer(default=8, bounds=(1, 64), label="Batch size")
    rate = param.Number(default=2.0, bounds=(0.1, 50.0), label="Request rate")
    share = param.Number(default=0.5, bounds=(0, 1), inclusive_bounds=(False, True))
    policy = param.Selector(default="continuous", objects=["static", "dynamic", "continuous"])
    streamed = param.Boolean(default=True)
    prompt = param.String(default="Hello")


def test_values_in_range_are_taken_silently():
    c = Controls()
    notices = apply_query_args(c, {"batch_size": "16", "rate": "3.5", "policy": "static",
                                   "streamed": "false", "prompt": "Why is the sky blue?"})
    assert notices == []
    assert (c.batch_size, c.rate, c.policy, c.streamed) == (16, 3.5, "static", False)
    assert c.prompt == "Why is the sky blue?"


def test_tornado_style_lists_of_bytes_are_read():
    c = Controls()
    assert apply_query_args(c, {"batch_size": [b"4", b"32"]}) == []
    assert c.batch_size == 32  # the last value wins, as in a form


@pytest.mark.parametrize("text, value, words", [
    ("1000", 64, "above the largest allowed (64)"),
    ("0", 1, "below the smallest allowed (1)"),
    ("-5", 1, "below the smallest allowed (1)"),
    ("7.6", 8, "rounded to 8"),
])
def test_numbers_are_clamped_with_a_notice(text, value, words):
    c = Controls()
    notices = apply_query_args(c, {"batch_size": text})
    assert c.batch_size == value
    assert len(notices) == 1 and words in notices[0] and "Batch size" in notices[0]


def test_exclusive_bound_is_respected():
    c = Controls()
    apply_query_args(c, {"share": "0"})
    assert 0 < c.share < 1e-300


@pytest.mark.parametrize("name, text", [("batch_size", "lots"), ("rate", "nan"),
                                        ("rate", "inf"), ("streamed", "maybe")])
def test_garbage_keeps_the_default_with_a_notice(name, text):
    c = Controls()
    before = getattr(c, name)
    notices = apply_query_args(c, {name: text})
    assert getattr(c, name) == before
    assert len(notices) == 1 and repr(text) in notices[0]


def test_unknown_choice_falls_back_with_a_notice():
    c = Controls()
    notices = apply_query_args(c, {"policy": "greedy"})
    assert c.policy == "continuous"
    assert "not one of static, dynamic, continuous" in notices[0]


def test_choice_matching_ignores_case():
    value, notice = parse_value(Controls(), "policy", "Static")
    assert value == "static" and notice is None


def test_unrelated_arguments_are_ignored_and_names_can_be_limited():
    c = Controls()
    assert apply_query_args(c, {"lesson": "knob", "embed": "true", "rate": "100"},
                            names=["batch_size"]) == []
    assert c.rate == 2.0


def test_long_text_is_cut():
    c = Controls()
    notices = apply_query_args(c, {"prompt": "x" * 5000})
    assert len(c.prompt) == 2000 and "cut" in notices[0]
