"""The about page shows the engine's first-start set-up (engine.lab.setup_state): its progress
while the worker builds the kernels and times the plans, and, once, why the kernels cannot be
built where they cannot."""

from __future__ import annotations

from in_process_service import attach

from engine.lab.setup_state import SetupState, write_state
from lessons.shell.about import AboutPage


def test_the_about_page_shows_the_setups_progress_and_follows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    page = AboutPage()
    attach(page)
    page.view()
    assert "has not started yet" in page.setup.object
    write_state(SetupState(state="running", done=2, total=5, message="small: matrix products "
                           "timed for 3 of 20 batch sizes", kernels="built"))
    page.refresh_status()
    shown = page.setup.object
    assert "step 2 of 5" in shown and "matrix products timed for 3 of 20" in shown
    assert '<progress max="5" value="2"' in shown and "plain path" in shown
    write_state(SetupState(state="done", done=5, total=5, kernels="built", path="fast"))
    page.refresh_status()
    assert "kernels are built" in page.setup.object and "<progress" not in page.setup.object


def test_the_about_page_says_once_why_the_kernels_cannot_be_built(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    why = "the C++ decode-attention kernel cannot be built here: no 'c++' (C++ compiler) found"
    write_state(SetupState(state="done", done=5, total=5, kernels="unavailable",
                           kernel_message=why, path="plain"))
    page = AboutPage()
    attach(page)
    page.view()
    assert page.setup.object.count("cannot be built here") == 1
    assert "plain path" in page.setup.object
