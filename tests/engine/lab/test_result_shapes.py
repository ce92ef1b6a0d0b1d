"""The typed result records that mirror an engine dataclass across the process boundary keep its
fields: a field added to the engine's Summary, Metrics or RequestPhases without its record (or
the other way round) fails here, not in a reader's page when a result will not parse."""

from __future__ import annotations

import dataclasses

import pytest

from engine.lab.results import Percentiles, PhaseSeconds, RunMetrics
from engine.serve.metrics import Metrics, Summary
from engine.serve.phases import RequestPhases


def shape(cls) -> list[tuple[str, object]]:
    return [(f.name, f.default) for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(("record", "engine"), [(Percentiles, Summary), (RunMetrics, Metrics),
                                                (PhaseSeconds, RequestPhases)])
def test_a_record_has_the_fields_of_the_engines_dataclass(record, engine):
    assert shape(record) == shape(engine)


def test_a_summary_parses_as_its_record():
    summary = Summary(1.0, 1.0, 2.0, 2.5, 3.0, 3.0, 4)
    assert Percentiles.from_dict(dataclasses.asdict(summary)).to_dict() == dataclasses.asdict(summary)
