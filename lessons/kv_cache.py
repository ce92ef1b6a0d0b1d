"""Lesson 6: KV cache memory. /app?lesson=kv-cache

Three demos:
- a calculator of KV bytes per token (engine.calc.kv_math) for public model shapes and the engine's
  presets, checked against the caches the engine really allocates (the `kv_allocation` job);
- the block tables of live sequences, recorded step by step during a real run
  (`block_snapshots`), drawn with widgets.block_table;
- how many sequences fit a memory budget the reader types, paged against contiguous reservation
  of the full context;
- fewer bytes a token, measured by the engine (the `kv_formats` job, drawn by
  lessons.kv_formats_view): an fp8 cache against the float one on tiny (what a budget holds,
  the decode step, the quality) and tiny-hybrid's window against full attention by context
  length; the "On a GPU" box: Llama-3-8B's cache on an H100 and an H200, in bf16 and fp8
  (computed from the datasheets' figures, engine.calc.kv_formats).

URL: budget_gb, model, kv_dtype, tokens_used: /app?lesson=kv-cache&budget_gb=40&model=Llama-2-7B

The lesson's words are in lessons/words/kv_cache.py, what it says of its numbers in
lessons/kv_findings.py, and its arithmetic (the formula, the fit, the allocation's check, the
blocks reused) in engine.calc.kv_math; this module is its view.
"""

from __future__ import annotations

import panel as pn
import param

from engine.calc.kv_math import (
    DEFAULT_BLOCK_SIZE,
    PUBLIC_SHAPES,
    CacheCheck,
    KVShape,
    busiest_step,
    cache_checks,
    fit,
    format_bytes,
    reused_blocks,
    shape_from_preset,
)
from engine.lab.results import (
    BlockSnapshot,
    BlockSnapshotsResult,
    InfoResult,
    KVAllocationResult,
    KVFormatsResult,
)
from widgets.block_table import BlockTableView
from widgets.count_bars import CountBars
from widgets.data_download import DataDownload
from widgets.html import html_pane
from widgets.tables import html_table, table_pane

from .base import LessonPage
from .data_record import data_header, result_header
from .kv_findings import allocation_question, check_html, check_summary, gpu_finding, ratio
from .kv_formats_view import formats_html, formats_rows, formats_sentence
from .number_input import number_problem
from .on_a_gpu import GpuBox
from .teaching import Lookup
from .words.kv_cache import (
    BLOCKS_TEXT,
    CALC_TEXT,
    CHECK_TEXT,
    FIT_TEXT,
    FORMATS_SOURCES,
    FORMATS_TEXT,
    INSTRUCTOR,
    INTRO,
    OBJECTIVES,
    PREDICTION,
    QUESTIONS,
    QUOTE,
    TAKEAWAY,
)

PRESET_NAMES = ("tiny", "small", "large")
MODEL_NAMES = tuple(s.name for s in PUBLIC_SHAPES) + PRESET_NAMES
GB = 1e9
MAX_BUDGET_GB = 100_000.0

class KVCacheLesson(LessonPage):
    """Lesson 6: the KV cache's size, its pages, and what it caps."""

    slug = "kv-cache"
    objectives, prediction, takeaway = OBJECTIVES, PREDICTION, TAKEAWAY
    instructor, questions = INSTRUCTOR, QUESTIONS

    budget_gb = param.Number(default=16.0, allow_None=True, label="KV memory budget (GB)",
                             doc="Memory left for the KV cache after the weights, in GB "
                                 "(10^9 bytes).")
    model = param.Selector(default="Llama-3-8B", objects=list(MODEL_NAMES), label="Model")
    kv_dtype = param.Selector(default="fp16", objects=["fp32", "fp16", "fp8"],
                              label="KV cache numbers")
    tokens_used = param.Integer(default=1000, bounds=(1, 131072),
                                label="Tokens per sequence (prompt + answer)")
    reserved_tokens = param.Integer(default=2048, bounds=(1, 131072),
                                    label="Reserved per sequence without paging "
                                          "(prompt + max_tokens)")

    def __init__(self, **params):
        super().__init__(**params)
        self.machine: InfoResult | None = None
        self.allocation: KVAllocationResult | None = None
        self.snapshots: list[BlockSnapshot] = []
        self.run_info: BlockSnapshotsResult | None = None
        self.events: dict = {}  # job kind -> its result's event (cached or fresh, when)
        self.calculator = table_pane(css_classes=["kv-calculator"])
        self.check = table_pane(css_classes=["kv-check"])
        self.check_summary = pn.pane.Markdown("Waiting for the engine's allocation...",
                                              sizing_mode="stretch_width",
                                              css_classes=["kv-check-summary"])
        self.blocks = BlockTableView(columns=16)
        self.player = pn.widgets.Player(label="Step of the run", start=0, end=1, value=0,
                                        interval=350, loop_policy="once", disabled=True,
                                        show_loop_controls=False, sizing_mode="stretch_width")
        self.player.param.watch(self._show_moment, "value")
        self.run_summary = pn.pane.Markdown("", sizing_mode="stretch_width",
                                            css_classes=["block-run-summary"])
        self.bars = CountBars(unit="sequences that fit", title="Sequences that fit the budget")
        self.fit_text = pn.pane.Markdown("", sizing_mode="stretch_width",
                                         css_classes=["fit-summary"])
        self.fit_error = pn.pane.Alert("", alert_type="warning", visible=False,
                                       sizing_mode="stretch_width")
        self.blocks_download = DataDownload("kv-block-tables", self.block_rows,
                                            self.blocks_header, "Every step's block tables")
        self.bars_download = DataDownload("kv-sequences-that-fit", self.bars_rows,
                                          self.bars_header, "The bars' counts")
        self.kv_formats: KVFormatsResult | None = None
        self.formats = table_pane(css_classes=["kv-formats"])
        self.formats.object = formats_html(None)
        self.formats_download = DataDownload("kv-formats", self.formats_rows,
                                             self.formats_header, "The formats' tables")
        self.gpu_box = GpuBox(gpu_finding)
        self._refresh_calculator()
        self._refresh_fit()

    # ---- jobs ----------------------------------------------------------------------------------------
    @classmethod
    def expected_numbers(cls, lookup: Lookup) -> list[str]:
        lines = []
        allocation = lookup("kv_allocation", {})
        if allocation is not None:
            lines += [f"{r.preset} ({r.dtype}): {r.bytes_per_token:,} KV bytes per token "
                      "allocated" for r in allocation.result.caches if r.engine_dtype]
        snapshots = lookup("block_snapshots", {})
        if snapshots is not None:
            r = snapshots.result
            lines.append(f"block-table run: {len(r.requests)} requests through {r.num_blocks} "
                         f"blocks of {r.block_size} tokens")
        return lines

    @classmethod
    def warm_jobs(cls) -> list[tuple[str, dict]]:
        return [("info", {}), ("kv_allocation", {}), ("block_snapshots", {}), ("kv_formats", {})]

    def start(self, fresh: bool = False) -> None:
        handlers = {"info": self.show_info, "kv_allocation": self.show_allocation,
                    "block_snapshots": self.show_snapshots, "kv_formats": self.show_formats}

        def on_result(kind):
            def on_event(event):
                if event.type == "result":
                    self.events[kind] = event
                    handlers[kind](event.result)
            return on_event

        self.runner.run([(kind, params, on_result(kind))
                         for kind, params in self.warm_jobs()], use_cache=not fresh)

    # ---- the calculator ------------------------------------------------------------------------------
    def preset_shapes(self) -> list[KVShape]:
        if self.machine is None:
            return []
        return [shape_from_preset(p.to_dict()) for p in self.machine.presets]

    def shape(self, name: str) -> KVShape | None:
        for s in (*PUBLIC_SHAPES, *self.preset_shapes()):
            if s.name == name:
                return s
        return None

    def show_info(self, info: InfoResult) -> None:
        self.machine = info
        self.gpu_box.set_info(info.to_dict())
        self._refresh_calculator()
        self._refresh_check()
        self._refresh_fit()

    def _refresh_calculator(self) -> None:
        rows = []
        for s in (*PUBLIC_SHAPES, *self.preset_shapes()):
            context = s.context
            rows.append([s.name, s.attention_kind, s.layers, f"{s.kv_heads} × {s.head_dim}",
                         f"{s.bytes_per_token('fp16'):,} ({format_bytes(s.bytes_per_token('fp16'))})",
                         f"{s.bytes_per_token('fp8'):,}",
                         f"{format_bytes(s.bytes_per_sequence(context, 'fp16'))} for {context:,}",
                         s.source])
        note = "" if self.machine else " (the engine's presets appear once its description arrives)"
        self.calculator.object = html_table(
            "KV bytes per token = 2 × layers × KV heads × head dim × bytes per element" + note,
            ["model", "attention", "layers", "KV heads × head dim", "bytes per token, fp16",
             "bytes per token, fp8", "one full context, fp16", "shape from"], rows,
            numeric=[False, False, True, True, True, True, True, False])

    # ---- the engine's real allocation ----------------------------------------------------------------
    def show_allocation(self, allocation: KVAllocationResult) -> None:
        self.allocation = allocation
        self._refresh_check()

    def agreement(self) -> list[CacheCheck]:
        """Each cache the engine allocated, with the formula's bytes per token beside it."""
        return [] if self.allocation is None else cache_checks(self.allocation.caches)

    def _refresh_check(self) -> None:
        rows = self.agreement()
        if not rows:
            return
        self.check.object = check_html(self.allocation, rows)
        engine_rows = [c for c in rows if c.row.engine_dtype]
        if engine_rows:
            self.checkpoint.provide("allocation", allocation_question(engine_rows[0].row))
        self.check_summary.object = check_summary(rows)
        self.say(self.check_summary.object)

    # ---- block tables --------------------------------------------------------------------------------
    def show_snapshots(self, result: BlockSnapshotsResult) -> None:
        self.run_info = result
        self.snapshots = list(result.snapshots)
        self.blocks.set_pool(result.num_blocks, result.block_size)
        if not self.snapshots:
            self.run_summary.object = "The run recorded no steps."
            return
        busiest = busiest_step(self.snapshots)
        self.player.param.update(end=max(1, len(self.snapshots) - 1), disabled=False)
        if self.player.value == busiest:
            self._show_moment()
        else:
            self.player.value = busiest
        reused = reused_blocks(self.snapshots)
        self.prediction_box.reveal(
            "Yes: blocks a request frees are taken by the next" if reused else
            "No: each request keeps its own blocks",
            f"{reused} of {result.num_blocks} blocks served more than one request in turn")
        self.run_summary.object = (
            f"A real run on {result.device} ({result.preset} preset): "
            f"{len(result.requests)} requests, {len(self.snapshots)} steps, a pool of "
            f"{result.num_blocks} blocks of {result.block_size} tokens "
            f"({format_bytes(result.bytes_per_block)} each, "
            f"{format_bytes(result.num_blocks * result.bytes_per_block)} in all). "
            f"{reused} blocks were used by more than one request in turn. "
            "The step shown first is the one with the most blocks in use.")

    def _show_moment(self, *_events) -> None:
        if self.snapshots:
            index = min(max(0, self.player.value), len(self.snapshots) - 1)
            self.blocks.show(self.snapshots[index])

    def block_rows(self) -> list[dict]:
        """Every step's block tables (the player shows one step at a time): one row per
        sequence live after the step."""
        return [{"step": snap.step, "t_s": snap.t_s, "free_blocks": snap.free,
                 "request": seq.id, "phase": seq.phase, "tokens": seq.tokens,
                 "blocks": " ".join(str(b) for b in seq.blocks)}
                for snap in self.snapshots for seq in sorted(snap.seqs, key=lambda q: q.id)]

    def blocks_header(self) -> dict:
        run = self.run_info
        return result_header(
            self, "block_snapshots", {}, run, self.events.get("block_snapshots"), "run",
            pool={} if run is None else {"blocks": run.num_blocks, "block_size": run.block_size,
                                         "bytes_per_block": run.bytes_per_block},
            columns="step: the engine step after which the tables were read; t_s: its time "
                    "(s into the run); free_blocks: blocks no request held; request, phase "
                    "(prefill or decode), tokens: a live sequence and the tokens it had cached; "
                    "blocks: its block table, the physical blocks in order")

    def bars_rows(self) -> list[dict]:
        data = self.bars.source.data
        return [{"layout": label, "sequences": count, "why": note}
                for label, count, note in zip(data["label"], data["count"], data["note"],
                                              strict=True)]

    def bars_header(self) -> dict:
        shape = self.shape(self.model)
        return data_header(
            self, "none (computed)", {"budget_gb": self.budget_gb, "model": self.model,
                                      "kv_dtype": self.kv_dtype,
                                      "tokens_used": self.tokens_used,
                                      "reserved_tokens": self.reserved_tokens,
                                      "block_size": DEFAULT_BLOCK_SIZE},
            device="none: computed, not measured", preset=self.model,
            measured="computed by engine.calc.kv_math.fit from the inputs (bytes per token: "
                     f"{shape.bytes_per_token(self.kv_dtype) if shape else 'unknown'})",
            check="not applicable (a formula, no measurement)",
            columns="layout: a slab reserving the full context, a slab reserving prompt + "
                    "max_tokens (reserved_tokens), or paged (whole blocks of what it holds); "
                    "sequences: how many fit the budget; why")

    def show_formats(self, result: KVFormatsResult) -> None:
        self.kv_formats = result
        self.formats.object = formats_html(result)
        self.say(formats_sentence(result))

    def formats_rows(self) -> list[dict]:
        """The formats section's figures (lessons.kv_formats_view.formats_rows)."""
        return formats_rows(self.kv_formats)

    def formats_header(self) -> dict:
        return result_header(
            self, "kv_formats", {}, self.kv_formats, self.events.get("kv_formats"),
            "formats' measurement",
            columns="table format: the cache tiny's engine built in the budget in each format "
                    "(bytes per block, blocks, requests of prompt + new tokens that fit) and its "
                    "decode step's median with a 95% interval; table quality: fp8 against the "
                    "float cache on held-out windows (top-1 agreement, largest logit "
                    "difference, loss in nats); table hybrid: one sequence grown through each "
                    "engine's block manager (blocks at the end and the most at once, bytes per "
                    "token, the formula's bytes per token, requests that fit)")

    # ---- paged against contiguous ---------------------------------------------------------------------
    @param.depends("budget_gb", "model", "kv_dtype", "tokens_used", "reserved_tokens",
                   watch=True)
    def _refresh_fit(self) -> None:
        problem = self.fit_problem()
        if problem:
            self.fit_error.param.update(object=problem, visible=True)
            self.fit_text.object = ""
            self.bars.set([])
            return
        self.fit_error.visible = False
        shape = self.shape(self.model)
        if shape is None:
            self.fit_text.object = f"Waiting for the engine to describe its {self.model} preset..."
            self.bars.set([])
            return
        per_token = shape.bytes_per_token(self.kv_dtype)
        budget = self.budget_gb * GB
        full = fit(budget, per_token, self.tokens_used, shape.context, DEFAULT_BLOCK_SIZE)
        asked = fit(budget, per_token, self.tokens_used, self.reserved_tokens,
                    DEFAULT_BLOCK_SIZE)
        self.bars.set([
            ("full context", full.contiguous,
             f"each reserves the whole context of {shape.context:,} tokens = "
             f"{format_bytes(full.contiguous_bytes_each)}; {100 * full.contiguous_waste:.0f}% "
             "of it stays empty"),
            ("prompt + max_tokens", asked.contiguous,
             f"each reserves {self.reserved_tokens:,} tokens = "
             f"{format_bytes(asked.contiguous_bytes_each)}; "
             f"{100 * asked.contiguous_waste:.0f}% of it stays empty"),
            ("paged", full.paged,
             f"each holds {self.tokens_used:,} tokens in "
             f"{-(-self.tokens_used // DEFAULT_BLOCK_SIZE):,} blocks of {DEFAULT_BLOCK_SIZE} = "
             f"{format_bytes(full.paged_bytes_each)}; {100 * full.paged_waste:.1f}% empty"),
        ])
        self.fit_text.object = (
            f"{shape.name} with an {self.kv_dtype} cache needs {per_token:,} bytes "
            f"({format_bytes(per_token)}) per token. A budget of {self.budget_gb:g} GB holds "
            f"**{full.contiguous:,} sequences** reserving the full context, "
            f"**{asked.contiguous:,}** reserving prompt + max_tokens, and **{full.paged:,} "
            f"paged**: {ratio(full.paged, asked.contiguous)} the prompt + max_tokens count. "
            "Paging wastes at most the unused tail of each sequence's last block. These are "
            "counts of sequences that fit, worked out from the formula, not a throughput "
            "measurement (the quoted 2-4x below is the vLLM paper's measured throughput).")

    def fit_problem(self) -> str:
        """A message for inputs that make no sense ('' when all is well)."""
        too_small = ("The memory budget must be more than 0 GB: type the memory left for the KV "
                     "cache once the weights are loaded, for example 16.")
        problem = number_problem(
            self.budget_gb, lo=0, above=True, hi=MAX_BUDGET_GB, empty=too_small, low=too_small,
            high=f"A budget of {{value:g}} GB is more than {MAX_BUDGET_GB:,.0f} GB: type a "
                 "budget one machine could have.")
        shape = self.shape(self.model)
        if not problem and shape is not None and self.tokens_used > shape.context:
            problem = (f"{shape.name} takes at most {shape.context:,} tokens per sequence; "
                       f"{self.tokens_used:,} tokens do not fit its context.")
        if not problem and shape is not None and self.reserved_tokens > shape.context:
            problem = (f"{shape.name} takes at most {shape.context:,} tokens per sequence; a "
                       f"server cannot reserve {self.reserved_tokens:,}.")
        if not problem and self.reserved_tokens < self.tokens_used:
            problem = (f"A reservation of {self.reserved_tokens:,} tokens cannot hold a "
                       f"sequence of {self.tokens_used:,}: prompt + max_tokens is at least what "
                       "the sequence uses.")
        return problem

    # ---- the page ------------------------------------------------------------------------------------
    def body(self) -> list:
        fit_controls = pn.Row(
            pn.widgets.FloatInput.from_param(self.param.budget_gb, step=1.0,
                                             sizing_mode="stretch_width"),
            pn.widgets.Select.from_param(self.param.model, sizing_mode="stretch_width"),
            pn.widgets.Select.from_param(self.param.kv_dtype, sizing_mode="stretch_width"),
            pn.widgets.IntInput.from_param(self.param.tokens_used, step=100,
                                           sizing_mode="stretch_width"),
            pn.widgets.IntInput.from_param(self.param.reserved_tokens, step=256,
                                           sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
        return [html_pane(INTRO), self.prediction_box, self.runner.status,
                html_pane(CALC_TEXT), self.calculator, html_pane(CHECK_TEXT), self.check,
                self.check_summary, html_pane(BLOCKS_TEXT), self.player, self.blocks,
                self.blocks_download, self.run_summary, html_pane(FIT_TEXT), fit_controls,
                self.fit_error, self.bars, self.bars_download, self.fit_text, html_pane(QUOTE),
                html_pane(FORMATS_TEXT), self.formats, self.formats_download,
                html_pane(FORMATS_SOURCES), self.gpu_box]

