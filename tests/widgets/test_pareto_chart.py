"""The frontier chart: points in setting order, the frontier flagged and drawn through them."""

import panel as pn

from widgets.pareto_chart import ParetoChart


def test_frontier_points_and_line():
    chart = ParetoChart(setting="batch size")
    pn.panel(chart).get_root()
    chart.set_points([
        {"setting": 4, "label": "batch 4", "per_user": 80.0, "total": 320.0, "n": 5,
         "per_user_lo": 75.0, "per_user_hi": 85.0, "total_lo": 300.0, "total_hi": 340.0},
        {"setting": 1, "label": "batch 1", "per_user": 100.0, "total": 100.0, "n": 5},
        {"setting": 8, "label": "batch 8", "per_user": 60.0, "total": 300.0, "n": 5},
    ])
    points = chart.points()
    assert [p["setting"] for p in points] == [1, 4, 8]
    assert [p["frontier"] for p in points] == [True, True, False]  # 8 is beaten by 4 on both
    assert chart.frontier.data == {"per_user": [80.0, 100.0], "total": [320.0, 100.0]}
    assert points[0]["total_lo"] != points[0]["total_lo"]  # no interval given: NaN, no whisker
    assert "300 to 340" in chart.table_html and chart.table_html.count(">no<") == 1
