"""What a group's provenance line says (widgets.job_text), from its results alone: live and
cached ones counted apart, a span of cache times, the plain path, and the disturbed share."""

from __future__ import annotations

from engine.lab.results import DisturbanceCheck
from widgets.job_text import PLAIN_PATH, Measurement, disturbed_line, label_parts

EARLY, LATE = "2026-11-22T02:48:18+0000", "2026-11-22T05:10:00+0000"


def check(disturbed: bool) -> DisturbanceCheck:
    return DisturbanceCheck(disturbed=disturbed, reasons=["the hypervisor took 40 ms"] * disturbed,
                            cores=[1], wall_s=1.0, cpu_s=1.0, wait_s=0.0, steal_s=0.04,
                            others_cpu_s=0.0, probe_before_ms=None, probe_after_ms=None,
                            probe_profile_ms=None, wait_limit=0.1, probe_limit=1.5)


def test_one_live_result_is_one_plain_line():
    assert label_parts([Measurement(False, "cpu", EARLY)]) == [
        "measured live on cpu at 2026-11-22 02:48 UTC"]
    assert label_parts([]) == [] and disturbed_line([]) == ""


def test_a_group_counts_live_and_cached_results_and_spans_the_cache_times():
    results = [Measurement(False, "cpu", EARLY), Measurement(True, "cpu", LATE),
               Measurement(True, "cpu", EARLY, path="plain")]
    live, cached, plain = label_parts(results)
    assert live == "1 measured live on cpu at 2026-11-22 02:48 UTC"
    assert cached == ("2 cached: measured on cpu at 2026-11-22 02:48 UTC to "
                      "2026-11-22 05:10 UTC")
    assert plain == f"1 {PLAIN_PATH}"


def test_the_disturbed_line_counts_the_disturbed_results_of_a_group():
    quiet, noisy = Measurement(False, "cpu", EARLY, check=check(False)), \
        Measurement(False, "cpu", LATE, check=check(True))
    assert disturbed_line([quiet]) == ""
    assert disturbed_line([noisy]) == ("DISTURBED: the hypervisor took 40 ms; not cached; "
                                       "measure again when the machine is quiet")
    assert disturbed_line([quiet, noisy, quiet]).startswith("1 of 3 DISTURBED: the hypervisor")
