"""`python -m engine tune` beside the session's set-up (test_tune.py): a plan on disk found from
the model's shapes with nothing built, bad input and failures in one line each, and the presets
it times covering every model a lesson offers. Each times, if anything, in a cache of its own."""

from __future__ import annotations

from helpers import run_engine

from engine.cli.tune import LESSON_PRESETS


def test_a_plan_on_disk_is_found_from_the_models_shapes_and_nothing_is_built(tmp_path,
                                                                             monkeypatch):
    """`tune` again: the plan a real build saved is found without making the model's weights
    (else a second `tune` would build every preset's model only to find its plan there)."""
    from engine.cli import tune
    from engine.steps import run_steps

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    assert not tune.plan_on_disk("draft")
    run_steps(tune.plan_steps("draft"))  # as the worker builds it: timed, saved
    assert tune.plan_on_disk("draft") and not tune.plan_on_disk("tiny")

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built for a plan on disk")

    monkeypatch.setattr(tune, "plan_steps", no_build)
    assert tune.plan_preset("draft") is None


def test_unknown_preset_is_refused_in_one_line_before_any_timing(tmp_path):
    out = run_engine(["tune", "--preset", "tiny", "--preset", "huge"], tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "error: unknown preset 'huge': choose one of tiny, mini, small, large (or a draft model: "
        "draft; an experts model: moe-mini, moe-mini-dense, moe-tiny, moe-tiny-dense; a "
        "hybrid-attention model: tiny-hybrid)"]


def test_a_plan_that_cannot_be_saved_says_why_in_one_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    out = run_engine(["tune", "--preset", "draft"], not_a_dir)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and errors[0].startswith("error: the machine's limits not measured: ")
    assert errors[1].startswith("error: draft's plan not timed: ")


def test_lesson_presets_cover_every_model_a_lesson_offers_or_warms():
    from lessons.registry import LESSONS, lesson_class

    offered = set()
    for lesson in LESSONS:
        page = lesson_class(lesson)
        if "preset" in page.param:
            offered.update(page.param.preset.objects)
        offered.update(params["preset"] for _, params in page.warm_jobs() if "preset" in params)
    assert offered and offered <= set(LESSON_PRESETS)
    assert "draft" in LESSON_PRESETS  # the speculative lesson's draft model
