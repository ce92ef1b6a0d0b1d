"""What the KV cache lesson (lessons/kv_cache.py) says of its numbers: the check of the
formula against the caches the engine really allocated (its table, its summary and the reader's
question on it), a ratio in words, and the "On a GPU" box's finding (Llama-3-8B's cache beside
its weights on an H100 and an H200, in bf16 and fp8).
"""

from __future__ import annotations

from engine.calc.gpu_scaling import LLAMA_3_8B
from engine.calc.kv_formats import H200, KV_GPUS, gpu_kv_row
from engine.calc.kv_math import CacheCheck
from engine.lab.results import KVAllocationResult, KVCacheRow
from widgets.checkpoint import Question, numeric_question
from widgets.tables import html_table

from .words.kv_cache import GPU_TEXT

GPU_CONTEXT = 8192


def gpu_finding(_machines) -> str:
    """Lesson 6's finding on an H100 and an H200: Llama-3-8B's KV cache beside its weights, in
    bf16 and fp8 (engine.calc.kv_formats.gpu_kv_row)."""
    rows = []
    for m in KV_GPUS:
        r = gpu_kv_row(m, GPU_CONTEXT)
        rows.append(f'<tr><th scope="row">{m.name} ({m.memory_gb:g} GB)</th>'
                    f'<td class="num">{r.free_bytes / 1e9:.0f} GB</td>'
                    f'<td class="num">{r.bf16_tokens:,}</td><td class="num">{r.fp8_tokens:,}</td>'
                    f'<td class="num">{r.bf16_sequences:,}</td>'
                    f'<td class="num">{r.fp8_sequences:,}</td></tr>')
    table = (f'<table class="plain"><caption>{LLAMA_3_8B.name} ({LLAMA_3_8B.kv_bytes_per_token:,}'
             f" bytes per token in bf16): what the memory beside its weights holds</caption>"
             '<thead><tr><th scope="col">GPU</th><th scope="col">left for KV</th>'
             '<th scope="col">tokens, bf16</th><th scope="col">tokens, fp8</th>'
             f'<th scope="col">{GPU_CONTEXT:,}-token conversations, bf16</th>'
             f'<th scope="col">{GPU_CONTEXT:,}-token conversations, fp8</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>')
    source = (f'<p class="source">{H200.name}: {H200.source}. {LLAMA_3_8B.name}: '
              f"{LLAMA_3_8B.source}.</p>")
    return GPU_TEXT + table + source


def ratio(a: int, b: int) -> str:
    """'3.2x' (a against b), or words when b is 0."""
    return f"{a / b:.1f}x" if b else "some, where reserving fits none, against"


def allocation_question(row: KVCacheRow) -> Question:
    """Bytes per token of one cache the engine really allocated; the key is its measurement."""
    layers, heads, dim, size = row.layers, row.kv_heads, row.head_dim, row.element_bytes
    measured = row.allocated_bytes / row.capacity_tokens
    return numeric_question(
        f"The engine's {row.preset} preset ({row.dtype}): {layers} layers, {heads} KV "
        f"heads of {dim}, {size} bytes per number. How many KV bytes per token did its cache "
        "really take?",
        (f"{measured:,.0f} bytes", f"The engine allocated {row.allocated_bytes:,} bytes for "
                                   f"{row.capacity_tokens:,} tokens = {measured:,.0f} per "
                                   f"token: 2 x {layers} x {heads} x {dim} x {size}."),
        [(f"{measured / 2:,.0f} bytes", "That counts the keys alone; the values take as much "
                                        "again (the formula's 2)."),
         (f"{measured / layers:,.0f} bytes", "That is one layer's share; every layer keeps its "
                                             "own keys and values."),
         (f"{measured * 2:,.0f} bytes", "That counts each key and value twice.")])


def check_html(allocation: KVAllocationResult, checks: list[CacheCheck]) -> str:
    """The table of each allocated cache: the formula's bytes per token against the engine's."""
    table = []
    for check in checks:
        r = check.row
        engine_note = " (what the engine serves with here)" if r.engine_dtype else ""
        table.append([f"{r.preset}, {r.dtype}{engine_note}",
                      f"2 × {r.layers} × {r.kv_heads} × {r.head_dim} × "
                      f"{r.element_bytes} = {check.formula:,}",
                      f"{r.allocated_bytes:,} bytes for {r.capacity_tokens:,} tokens",
                      f"{check.measured:,.0f}", "agrees" if check.agrees else "DIFFERS"])
    return html_table(
        f"The engine's paged KV cache on {allocation.device}: "
        f"{allocation.blocks} blocks of {allocation.block_size} tokens each",
        ["cache", "formula (bytes per token)", "the engine allocated",
         "allocated bytes per token", "check"], table,
        numeric=[False, True, True, True, False])


def check_summary(checks: list[CacheCheck]) -> str:
    """Whether every cache agrees with the formula and, if so, what the engine serves with."""
    bad = [c for c in checks if not c.agrees]
    if bad:
        return f"**{len(bad)} of {len(checks)} caches differ from the formula**: see the table."
    serving = ", ".join(f"{c.row.preset} {c.measured:,.0f} bytes per token ({c.row.dtype})"
                        for c in checks if c.row.engine_dtype)
    return (f"**All {len(checks)} caches agree with the formula.** What the engine serves with "
            f"on this device: {serving}.")
