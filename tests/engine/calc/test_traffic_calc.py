"""Per-class figures of a run (engine/calc/traffic.py), on planted request records."""

from __future__ import annotations

import numpy as np
import pytest

from engine.calc.traffic import ClassRecord, class_stats, ratio


def rec(cls, tenant, arrival, first, finish, tokens, refused=None):
    return ClassRecord(cls, tenant, arrival, first, finish, tokens, refused)


RECORDS = [
    rec("batch", "job", 0.0, 1.0, 9.0, 40),
    rec("batch", "job", 0.0, 2.0, 10.0, 60),
    rec("interactive", "ann", 1.0, 1.1, 1.5, 5),
    rec("interactive", "bob", 2.0, 2.4, 3.0, 5),
    rec("interactive", "flood", 2.0, 5.0, 6.0, 5),
    rec("interactive", "flood", 2.1, None, None, 0, "refused: queue full"),
]


def test_each_class_gets_its_ttft_percentiles_refusals_and_throughput():
    stats = class_stats(RECORDS)
    batch, chat = stats["batch"], stats["interactive"]
    assert (batch.arrived, batch.completed, batch.refused) == (2, 2, 0)
    assert batch.span_s == 10.0 and batch.throughput_tok_s == pytest.approx(100 / 10)
    assert (chat.arrived, chat.completed, chat.refused) == (4, 3, 1)
    ttfts = [100, 400, 3000]
    assert chat.ttft_p50.value == pytest.approx(np.percentile(ttfts, 50))
    assert chat.ttft_p99.value == pytest.approx(np.percentile(ttfts, 99))
    assert chat.ttft_p99.n == 3 and not chat.ttft_p99.bounded  # a P99 needs 100 requests


def test_the_flooding_tenant_is_counted_apart():
    stats = class_stats(RECORDS, split_tenant="flood")
    assert list(stats) == ["batch", "interactive", "interactive/flood"]
    assert stats["interactive"].completed == 2
    assert stats["interactive"].ttft_p50.value == pytest.approx(250)
    assert (stats["interactive/flood"].completed, stats["interactive/flood"].refused) == (1, 1)


def test_records_read_from_the_run_json():
    r = ClassRecord.from_json({"arrival_s": 0.5, "first_token_s": 0.7, "finish_s": 1.0,
                               "token_s": [0.7, 0.8, 1.0], "traffic_class": "batch",
                               "tenant": "job"})
    assert r == rec("batch", "job", 0.5, 0.7, 1.0, 3)


def test_ratio():
    assert ratio(3.0, 1.5) == 2.0 and ratio(None, 1.0) is None and ratio(1.0, 0) is None
