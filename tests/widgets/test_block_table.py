"""The KV block pool picture: one cell per physical block, coloured by its owner."""

from __future__ import annotations

import panel as pn
import pytest

from engine.lab.results import BlockSnapshot, SnapshotSeq
from widgets.block_table import FREE_COLOR, BlockTableView, owner_color

SNAPSHOT = BlockSnapshot(step=7, t_s=0.42, free=5, finished=[], seqs=[
    SnapshotSeq(id=1, blocks=[3, 0, 6], tokens=35, phase="decode"),
    SnapshotSeq(id=4, blocks=[2], tokens=16, phase="prefill")])


def test_the_grid_has_one_cell_per_block():
    view = BlockTableView(num_blocks=10, columns=4)
    pn.panel(view).get_root()
    data = view.source.data
    assert data["block"] == [str(b) for b in range(10)]
    assert data["x"][:5] == [0, 1, 2, 3, 0] and data["y"][:5] == [0, 0, 0, 0, -1]
    view.set_pool(6, 16)
    assert len(view.source.data["block"]) == 6


def test_a_snapshot_colours_owned_blocks_and_lists_block_tables():
    view = BlockTableView(num_blocks=10, block_size=16)
    pn.panel(view).get_root()
    view.show(SNAPSHOT)
    data = view.source.data
    assert [data["owner"][b] for b in (3, 0, 6, 2)] == ["request 1"] * 3 + ["request 4"]
    assert data["color"][3] == owner_color(1) and data["color"][5] == FREE_COLOR
    assert data["fill"][3] == 16 and data["fill"][6] == 3 and data["fill"][2] == 16
    assert data["alpha"][6] < data["alpha"][3]
    assert "step 7, 0.42 s into the run" in view.figure.title.text
    assert "5 free" in view.figure.title.text
    table = view.table_html
    assert "3 → 0 → 6" in table and "3 of 16" in table and "prefill" in table
    view.show(BlockSnapshot(step=8, t_s=0.5, free=10, finished=[1, 4], seqs=[]))  # all done
    assert set(view.source.data["owner"]) == {"free"}


def test_a_block_outside_the_pool_is_refused():
    view = BlockTableView(num_blocks=4)
    with pytest.raises(ValueError, match="outside the pool"):
        view.show(BlockSnapshot(step=1, t_s=0.0, free=3, finished=[],
                                seqs=[SnapshotSeq(id=0, blocks=[9], tokens=1, phase="decode")]))
