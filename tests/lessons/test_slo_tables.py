"""The SLO lesson's cost lines and uses table (lessons.slo_tables) from operating points alone,
without a page or a run: the arithmetic shown, the goodput line for chat use only, and the
sentence in place of a price when no token met the SLO."""

from __future__ import annotations

from engine.calc.rate_sweep import OperatingPoints
from lessons.slo_tables import UseFigures, cost_text, summary_text, uses_html

BEST = OperatingPoints(goodput_rate=4.0, goodput_tok_s=250.0, goodput_rps=3.5,
                       throughput_rate=8.0, throughput_tok_s=400.0)


def test_chat_use_prices_every_token_and_the_good_ones_in_the_open():
    every, good = cost_text(BEST, 3.6, "interactive").splitlines()
    assert every == ("- Counting every token (batch use: the throughput), at 8.00 requests/s: "
                     "(3.6 / 3600) × (1,000,000 / 400) = **$2.50 per million tokens**")
    assert good.endswith("at 4.00 requests/s: (3.6 / 3600) × (1,000,000 / 250) = "
                         "**$4.00 per million tokens**")


def test_batch_use_prices_every_token_only_and_no_good_token_has_no_price():
    assert cost_text(BEST, 3.6, "batch").count("\n") == 0
    none_good = OperatingPoints(4.0, None, None, 8.0, 400.0)
    lines = cost_text(none_good, 3.6, "interactive").splitlines()
    assert lines[1].startswith("- Counting only tokens within the SLO (chat use: goodput): no "
                               "request met the SLO")


def test_the_uses_table_counts_goodput_for_chat_and_throughput_for_batch():
    html = uses_html({"interactive": UseFigures(BEST, 8, "cpu"),
                      "batch": UseFigures(BEST, 32, "cpu")}, 3.6)
    assert html.index("interactive chat") < html.index("overnight batch")
    assert "$4.00" in html and "$2.50" in html  # 250 good tokens/s for chat, 400 for batch


def test_no_summary_before_a_point_is_judged():
    assert summary_text([], BEST, "interactive") == "" and summary_text([], None, "batch") == ""
