"""The calibration probe around timed jobs (engine.lab.jobs.probe): a job that starts right
after the last probe (the previous job's after-probe, as in a class's run of knob points) takes
that figure as its before-probe; a job that starts later probes afresh."""

from __future__ import annotations

from engine.lab.jobs import probe


def test_back_to_back_jobs_share_one_probe_between_them_and_a_later_job_probes_again(
        monkeypatch):
    p = probe.get_probe()
    p.last = None  # an earlier test's job may have probed just now
    reps: list[int] = []
    real = p._once
    monkeypatch.setattr(p, "_once", lambda: reps.append(1) or real())
    per_probe = 1 + probe.REPS  # an unrecorded rep, then REPS

    _, first = probe.measure_checked(lambda: None)
    assert len(reps) == 2 * per_probe  # before and after
    _, second = probe.measure_checked(lambda: None)
    assert len(reps) == 3 * per_probe  # after only: the first's after-probe is its before-probe
    assert second["probe_before_ms"] == first["probe_after_ms"]

    ms, ended = p.last
    p.last = (ms, ended - 2 * probe.FRESH_S)  # the worker waited for its next job meanwhile
    _, third = probe.measure_checked(lambda: None)
    assert len(reps) == 5 * per_probe
    assert p.figures[-2:] == [third["probe_before_ms"], third["probe_after_ms"]]  # its own
