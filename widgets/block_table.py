"""The paged KV cache at one moment: the pool of physical blocks as a grid, each block coloured by
the sequence holding it (shaded by how full it is), and each sequence's block table (the list of
physical blocks holding its tokens in order) as a table beside it.

Fed with the block_snapshots job's snapshots (engine.lab.results.BlockSnapshot: step, t_s,
free, seqs with id, blocks, tokens, phase). The grid is built once per pool size; a new snapshot
patches the colours in place.
"""

from __future__ import annotations

import param
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from engine.lab.results import BlockSnapshot

from .chart_view import ChartView
from .palette import FREE_FILL, INK, LABELLED_FILL, OUTLINE
from .runtime.doc_hold import changes_bokeh_models
from .tables import html_table

PALETTE = LABELLED_FILL  # block numbers are drawn on them in INK
FREE_COLOR = FREE_FILL
FIELDS = ("x", "y", "block", "owner", "color", "alpha", "fill")


def owner_color(seq_id: int) -> str:
    return PALETTE[seq_id % len(PALETTE)]


class BlockTableView(ChartView):
    """Which physical KV block each live sequence holds, at one step of a real run."""

    num_blocks = param.Integer(default=0, bounds=(0, None), doc="Blocks in the pool.")
    block_size = param.Integer(default=16, bounds=(1, None), doc="Tokens per block.")
    columns = param.Integer(default=16, bounds=(1, None), doc="Blocks per row of the grid.")

    def __init__(self, **params):
        super().__init__(**params)
        self.source = ColumnDataSource({f: [] for f in FIELDS}, name="kv blocks")
        fig = figure(height=220, sizing_mode="stretch_width", tools="hover,save",
                     title="Physical KV blocks", x_axis_type=None, y_axis_type=None,
                     toolbar_location="right")
        fig.rect("x", "y", width=0.92, height=0.92, source=self.source, fill_color="color",
                 fill_alpha="alpha", line_color=OUTLINE)
        fig.text("x", "y", text="block", source=self.source, text_align="center",
                 text_baseline="middle", text_font_size="9px", text_color=INK)
        fig.select_one(HoverTool).tooltips = [("block", "@block"), ("held by", "@owner"),
                                              ("tokens in it", "@fill")]
        fig.grid.visible = False
        self.snapshot: BlockSnapshot | None = None
        self._place(fig, "Grid of the KV cache's physical blocks, coloured by the request "
                    "holding each", table_css="block-tables")
        self._build_grid()

    @param.depends("num_blocks", "columns", watch=True)
    @changes_bokeh_models
    def _build_grid(self) -> None:
        n, cols = self.num_blocks, self.columns
        rows = -(-n // cols) if n else 0
        self.source.data = {
            "x": [b % cols for b in range(n)], "y": [-(b // cols) for b in range(n)],
            "block": [str(b) for b in range(n)], "owner": ["free"] * n,
            "color": [FREE_COLOR] * n, "alpha": [1.0] * n, "fill": [0] * n,
        }
        self.figure.height = max(120, 36 * rows + 60)
        self.snapshot = None
        self._table.object = html_table("Block tables of the live sequences", _HEAD, [])
        self.text.say(f"A pool of {n} blocks, none held yet.")

    def set_pool(self, num_blocks: int, block_size: int) -> None:
        self.param.update(num_blocks=num_blocks, block_size=block_size)

    @changes_bokeh_models
    def show(self, snapshot: BlockSnapshot) -> None:
        """Colour the grid and fill the table from one snapshot."""
        n, bs = self.num_blocks, self.block_size
        owner = ["free"] * n
        color = [FREE_COLOR] * n
        alpha = [1.0] * n
        fill = [0] * n
        rows = []
        for seq in sorted(snapshot.seqs, key=lambda s: s.id):
            blocks, tokens = seq.blocks, seq.tokens
            for i, b in enumerate(blocks):
                if not 0 <= b < n:
                    raise ValueError(f"block {b} is outside the pool of {n} blocks")
                held = max(0, min(bs, tokens - i * bs))
                owner[b] = f"request {seq.id}"
                color[b] = owner_color(seq.id)
                alpha[b] = 0.3 + 0.7 * held / bs
                fill[b] = held
            last = tokens - (len(blocks) - 1) * bs if blocks else 0
            rows.append([f"request {seq.id}", seq.phase, f"{tokens:,}",
                         " → ".join(str(b) for b in blocks), f"{last} of {bs}"])
        self.source.patch({"owner": [(slice(0, n), owner)], "color": [(slice(0, n), color)],
                           "alpha": [(slice(0, n), alpha)], "fill": [(slice(0, n), fill)]})
        free = snapshot.free
        when = f"step {snapshot.step}, {snapshot.t_s:.2f} s into the run"
        self.figure.title.text = (f"Physical KV blocks at {when}: {n - free} held, {free} free "
                                  f"({bs} tokens each)")
        self.text.say(f"{self.figure.title.text}, by {len(rows)} requests.")
        self._table.object = html_table(
            f"Block tables at {when} (each row: the physical blocks holding that request's "
            "tokens, in order)", _HEAD, rows, numeric=[False, False, True, False, True])
        self.snapshot = snapshot


_HEAD = ["sequence", "doing", "tokens cached", "block table (physical blocks, in order)",
         "tokens in its last block"]
