"""Lesson 5 without a browser: which jobs it asks for, and what it draws from their real results
(measured on this machine by tests/lessons/in_process_service.py, on the tiny preset)."""

from __future__ import annotations

from types import SimpleNamespace

import panel as pn
import pytest
from in_process_service import DEVICE, InProcessService, attach
from lesson_stubs import downloaded, said

from engine.calc.cache_fit import floors
from engine.calc.prefill_fit import attention_crossover, fit_quadratic
from engine.calc.step_cost import decode_context, decode_cost
from engine.config import PRESETS
from engine.hardware import measure_matmul
from engine.lab import quality
from engine.lab.results import PresetShape, parse_result
from lessons.roofline import CACHED, DECODE, PREFILL, RooflineLesson, powers
from lessons.roofline_findings import curve_summary
from widgets.tables import sig


def lesson(args=None, service=None):
    """The page drawn with the in-process service: it starts measuring, as on load."""
    page = RooflineLesson.from_url(args or {})
    service = attach(page, service)
    pn.panel(page).get_root()
    return page, service


def test_powers_end_at_the_limit():
    assert powers(1, 2, 32) == [1, 2, 4, 8, 16, 32]
    assert powers(1, 2, 6) == [1, 2, 4, 6]
    assert powers(16, 4, 1024) == [16, 64, 256, 1024] and powers(16, 4, 16) == [16]


def test_the_url_picks_the_measurements():
    held = InProcessService(hold={"info", "sweep_point", "prefill_point"})  # asked, not run
    page, service = lesson({"preset": [b"tiny"], "max_batch": [b"4"], "max_prompt": [b"64"]},
                           held)
    # 16 and 64 tokens for the roofline, 6 more spread up to the context for the curve's fit
    assert service.kinds() == ["info"] + ["sweep_point"] * 3 + ["prefill_point"] * 8
    prefills = [j.params["prompt_len"] for j in service.submitted if j.kind == "prefill_point"]
    assert prefills == [16, 64, 341, 682, 1023, 1364, 1705, 2047]
    sweeps = [j.params for j in service.submitted if j.kind == "sweep_point"]
    assert [p["batch_size"] for p in sweeps] == [1, 2, 4]
    assert all(p["preset"] == "tiny" and p["prompt_len"] == 128 for p in sweeps)
    assert RooflineLesson.warm_jobs()[0] == ("info", {})
    # the default (mini) at 6 batch sizes and 4 + 6 prompts, and tiny's decode at batch 1, 2, 4
    warm = RooflineLesson.warm_jobs()
    assert len(warm) == 1 + 6 + 10 + 3
    assert [p["preset"] for k, p in warm[1:]] == ["mini"] * 16 + ["tiny"] * 3


TINY = {"preset": [b"tiny"], "max_batch": [b"4"], "max_prompt": [b"256"],
        "curve_points": [b"0"]}  # the curve's long prefills are tested on planted points


def test_points_land_under_the_roofs_with_the_preset_formulas():
    page, service = lesson(TINY)
    info = service.result("info")
    bw, peak = info["memory_bandwidth_gbs"], info["matmul_gflops"]
    assert page.chart.bandwidth_gbs == bw and page.chart.peak_gflops == peak
    decode = page.chart.points(DECODE)
    assert [p["label"] for p in decode] == ["decode, batch 1", "decode, batch 2",
                                            "decode, batch 4"]
    top = [j.result for j in service.submitted if j.kind == "sweep_point"][-1]
    shape = {**PRESETS["tiny"].describe("cpu"), "weight_bytes": top["weight_bytes"]}
    cost = decode_cost(shape, 4, decode_context(128, 32))
    assert decode[2]["intensity"] == pytest.approx(cost.intensity)
    assert decode[2]["gflops"] == pytest.approx(cost.flops / (top["tpot_ms"] / 1000) / 1e9)
    # None above the compute roof. The roof drawn is the peak measured once and cached, maybe
    # while the machine was busy (one cache held 58.5 GFLOP/s, others 83-183): the points are
    # compared with the better of it and the peak measured now, under the load they had.
    roof = max(peak, measure_matmul(info["device"])[0])
    for point in decode + page.chart.points(PREFILL):
        assert 0 < point["gflops"] <= 1.5 * roof, (point, peak, roof)
    assert [p["label"] for p in page.chart.points(PREFILL)][-1] == "prefill, 256 tokens"
    for point in decode + page.chart.points(PREFILL):  # each time: a median, its interval, n
        assert point["n"] >= 2 and point["ms_lo"] <= point["ms"] <= point["ms_hi"]
        assert point["gflops_lo"] <= point["gflops"] <= point["gflops_hi"]  # ends swapped
        assert f"{sig(point['ms'])} [{sig(point['ms_lo'])}–{sig(point['ms_hi'])}]" in \
            page.chart.table_html
    assert decode[2]["n"] == len(top["step_ms"])
    rows = page.floor.rows()
    assert [r["x"] for r in rows] == [1, 2, 4]
    for row, point in zip(rows, decode, strict=True):  # the same steps' median and interval
        assert (row["measured"], row["lo"], row["hi"], row["n"]) == (
            point["ms"], point["ms_lo"], point["ms_hi"], point["n"])
        assert f"{sig(row['measured'])} [{sig(row['lo'])}–{sig(row['hi'])}]" in \
            page.floor.table_html
    one = decode_cost(shape, 1, decode_context(128, 32))
    assert rows[0]["floor"] == pytest.approx(1000 * one.bytes / (bw * 1e9))
    assert f"{sig(bw)} GB/s" in page.limits.object
    assert f"{sig(info['ridge_flop_per_byte'])} FLOP" in page.limits.object
    assert "Decode, batch 1" in page.roof_summary.object
    assert "Prefill, 256 tokens" in page.roof_summary.object
    first = [j.result for j in service.submitted if j.kind == "sweep_point"][0]
    assert f"the engine took **{sig(first['tpot_ms'])} ms**" in page.floor_summary.object
    spread = first["spread"]  # and how steady its steps were
    assert f"p10 to p90 {sig(spread['p10'])}\u2013{sig(spread['p90'])} ms" \
        in page.floor_summary.object
    disturbed = [j for j in service.submitted
                 if j.kind != "info" and j.result["check"]["disturbed"]]
    assert ("**Disturbed:**" in page.roof_summary.object) == bool(disturbed)
    assert not page.runner.status.running and "measured live" in page.runner.status.label_text
    # each point is said in words as it comes (throttled: the last of the burst is read)
    assert any(s and s.startswith("Prefill of 256 tokens measured: ") and "GFLOP/s" in s
               for s in said(page))


def test_limits_measured_beside_other_work_are_labelled_so():
    """The info job's limits, when its disturbance check says other work took the engine's core
    (engine.hardware keeps them only when quiet): the page says they may read low."""
    page, service = lesson(TINY)
    info = service.result("info")
    measured = info["check"]  # None: read from disk, where only quiet limits are kept
    assert ("not kept" in page.limits.object) == bool(measured and measured["disturbed"])
    before = quality.Usage(cores=(1,), wall=0.0, cpu_s=0.0, threads={7: (0, 0)},
                           ticks={1: (0, 0)})
    after = quality.Usage(cores=(1,), wall=1.5, cpu_s=1.0, threads={7: (10**9, 5 * 10**8)},
                          ticks={1: (150, 0)})  # waited 500 ms for its core in 1 s of work
    page.show_info(parse_result("info", {**info, "check": quality.check(before, after)}))
    assert "not kept, and are measured again when the machine is quiet" in page.limits.object
    assert f"{sig(info['memory_bandwidth_gbs'])} GB/s" in page.limits.object


def test_the_downloads_are_the_points_of_both_charts():
    """The roofline's points and the floor chart's, as drawn; the header names every job by its
    point's label, with its parameters and origin, and the machine's measured roofs."""
    page, service = lesson(TINY)
    head, rows = downloaded(page.download)
    assert rows == [{"kind": kind, **p} for kind in (DECODE, PREFILL)
                    for p in page.chart.points(kind)]
    assert len(rows) == 3 + 3
    floor_head, floor_rows = downloaded(page.floor_download)
    assert floor_rows == page.floor.rows() and [r["x"] for r in floor_rows] == [1, 2, 4]
    assert list(head["params"]) == ["machine limits"] + [r["label"] for r in rows]
    assert head["params"]["decode, batch 2"]["batch_size"] == 2
    assert head["params"]["prefill, 256 tokens"]["prompt_len"] == 256
    assert head["measured"].count("fresh, measured") == 1 + 6
    info = service.result("info")
    assert head["roofs"]["memory_bandwidth_gbs"] == info["memory_bandwidth_gbs"]
    assert head["device"] == DEVICE and head["preset"] == "tiny"
    assert floor_head["params"] == head["params"]


def test_a_disturbed_point_is_named_under_the_chart():
    page, service = lesson({**TINY, "max_batch": [b"2"], "max_prompt": [b"16"]})
    first = [j.result for j in service.submitted if j.kind == "sweep_point"][0]
    check = {**first["check"], "disturbed": True, "reasons": ["other work took 300 ms"]}
    page.show_decode(parse_result("sweep_point", {**first, "check": check}))
    assert page.disturbed_points()[0] == "decode batch 1"
    assert "**Disturbed:** decode batch 1" in page.roof_summary.object


def test_points_that_come_before_the_machines_limits_wait_for_them():
    service = InProcessService(hold={"info", "sweep_point", "prefill_point"})
    page, _ = lesson({**TINY, "max_batch": [b"2"], "max_prompt": [b"16"]}, service)
    service.release(reverse=True)  # the points first, the machine's info last
    assert len(page.chart.points(DECODE)) == 2 and len(page.chart.points(PREFILL)) == 1
    assert page.pending == []


def test_moving_a_control_measures_again_and_drops_the_old_batch():
    service = InProcessService(hold={"sweep_point"})
    page, _ = lesson({**TINY, "max_batch": [b"2"], "max_prompt": [b"16"]}, service)
    old = [j for j in service.submitted if j.kind == "sweep_point"]
    page.max_batch = 1
    assert set(service.cancelled) == set(old)
    service.release()
    assert [p["label"] for p in page.chart.points(DECODE)] == ["decode, batch 1"]


def test_an_engine_error_is_a_message():
    page, _ = lesson({**TINY, "max_batch": [b"1"], "max_prompt": [b"16"]},
                     InProcessService(fail={"prefill_point": "the KV budget holds no block"}))
    assert "the KV budget holds no block" in page.runner.status.error._alert.object
    assert len(page.chart.points(DECODE)) == 1


def test_the_url_is_clamped_with_a_notice():
    page = RooflineLesson.from_url({"max_batch": [b"500"]})
    assert page.max_batch == 64 and "largest allowed (64)" in page.notices[0]


def test_checkpoint_questions():
    assert len(RooflineLesson.questions) >= 3


def test_the_prediction_and_the_question_follow_the_batch_1_step():
    page, _ = lesson({**TINY, "max_batch": [b"2"], "max_prompt": [b"16"]})
    one = page.decode_results[1]
    share = one.achieved_gflops / page.machine.matmul_gflops
    assert f"{100 * share:.0f}%" in page.prediction_box.verdict
    asked = page.checkpoint.questions[-1].question
    left = one.intensity < page.machine.ridge_flop_per_byte
    assert asked.answer.text.startswith("Memory bandwidth" if left else "The compute peak")
    assert "NVIDIA H100" in page.gpu_box.text and "(measured here)" in page.gpu_box.text


def test_tiny_beside_the_default_is_placed_under_the_cache_roof_against_both_floors():
    """A page of another preset draws tiny's decode steps as their own series, the cache roof
    from the info job, and tiny's batch-1 step against the memory and the cache floors."""
    tiny_page, service = lesson({**TINY, "max_batch": [b"1"], "max_prompt": [b"16"]})
    info = {**service.result("info"), "cache_bandwidth_gbs": 150.0, "llc_bytes": 32 * 2**20}
    tiny = [j.result for j in service.submitted if j.kind == "sweep_point"][0]
    page, held = lesson({"max_batch": [b"1"], "max_prompt": [b"16"], "curve_points": [b"0"]},
                        InProcessService(hold={"info", "sweep_point", "prefill_point"}))
    assert [(j.kind, j.params.get("preset")) for j in held.submitted] == [
        ("info", None), ("sweep_point", "mini"), ("prefill_point", "mini"),
        ("sweep_point", "tiny")]
    page.show_info(parse_result("info", info))
    page.show_decode(parse_result("sweep_point", tiny))
    assert page.chart.cache_gbs == 150.0 and page.chart._cache_line.visible
    assert [p["label"] for p in page.chart.points(CACHED)] == ["tiny decode, batch 1"]
    assert page.chart.points(DECODE) == []
    step = page.cached_results[1]
    f = floors(step.bytes, tiny["tpot_ms"], info["memory_bandwidth_gbs"], 150.0)
    text = page.cache_summary.object
    assert f"**{sig(f.memory_floor_ms)} ms**" in text and f"**{sig(f.cache_floor_ms)} ms**" in text
    assert "it fits" in text  # 22 MB of weights against 33.6 MB
    assert ("below the memory floor" in text) == f.beats_memory_floor
    assert "150 GB/s" in page.limits.object


def test_the_prefill_curve_fits_the_passes_and_names_both_terms():
    held = InProcessService(hold={"info", "sweep_point", "prefill_point"})
    page, _ = lesson({"preset": [b"tiny"], "max_batch": [b"1"], "max_prompt": [b"16"]}, held)
    a, b, c = 2.0, 0.01, 4e-6  # ms, ms per token, ms per token^2: equal terms at 2,500 tokens
    lengths = [16, 341, 682, 1023]
    page.prefill_results = {n: SimpleNamespace(ms=a + b * n + c * n * n) for n in lengths[:3]}
    page._fit_curve()
    assert page.curve.fit is None and "3 of at least 4" in page.curve_summary.object
    page.prefill_results[1023] = SimpleNamespace(ms=a + b * 1023 + c * 1023 ** 2)
    page._fit_curve()
    fit = page.curve.fit
    assert (fit.a.value, fit.b.value, fit.c.value) == pytest.approx((a, b, c), rel=1e-6)
    data = page.curve.curves.data  # the two terms drawn apart, and their sum
    for x, total, linear, quad in zip(data["length"], data["total"], data["linear"],
                                      data["quadratic"], strict=True):
        assert total == pytest.approx(linear + quad)
        assert quad == pytest.approx(c * x * x)
    summary = page.curve_summary.object
    share = c * 1023 ** 2 / (a + b * 1023 + c * 1023 ** 2)
    assert f"the attention term c×L² is {share:.0%}" in summary
    assert "L = b / c = 2,500 tokens, beyond the lengths measured" in summary
    assert "attention term" in page.curve.text.sentence


def test_the_curve_summary_counts_the_flop_crossover_from_the_presets_shape():
    shape = PresetShape.from_dict({**PRESETS["tiny"].describe("cpu"), "weight_bytes": 1})
    fit = fit_quadratic([1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0])  # a straight line: no crossover
    summary = curve_summary(fit, [(1, 1.0), (4, 4.0)], shape)
    flops = attention_crossover(shape.params - shape.vocab * shape.hidden, shape.heads,
                                shape.head_dim, shape.layers)
    assert f"L* = {flops:,.0f} tokens" in summary and "Measured crossover" not in summary
