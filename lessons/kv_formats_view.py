"""Lesson 6's formats section drawn from the engine's `kv_formats` job (engine.lab.jobs.kv_formats):
an fp8 cache against the float one (blocks a budget holds, requests that fit, the decode step,
the quality) and tiny-hybrid against full attention (bytes per token, requests that fit). Every
figure is the engine's own; the one column worked out from a formula says so."""

from __future__ import annotations

from html import escape

from engine.calc.kv_formats import fp8_bytes_per_block
from engine.config import get_preset
from engine.lab.results import KVFormatsResult
from widgets.tables import html_table, sig

WAITING = "<p>Waiting for the engine to measure the two formats...</p>"


def _ms(row) -> str:
    if row.step_ms_lo is None or row.step_ms_hi is None:
        return f"{sig(row.step_ms)} (n = {row.steps_timed})"
    return (f"{sig(row.step_ms)} (95% CI {sig(row.step_ms_lo)} to {sig(row.step_ms_hi)}, "
            f"n = {row.steps_timed})")


def fp8_table(r: KVFormatsResult) -> str:
    """The formats side by side: block bytes (measured, and fp8's formula), blocks, requests."""
    cfg = get_preset(r.preset)
    formula = fp8_bytes_per_block(cfg.layers, cfg.kv_heads, cfg.head_dim, r.block_size)
    tokens = r.prompt_len + r.new_tokens
    rows = [[f.kv_dtype, f"{f.bytes_per_block:,}",
             f"{formula:,}" if f.kv_dtype == "fp8" else "-", f"{f.blocks:,}",
             f"{f.requests_fit:,}", _ms(f)] for f in r.formats]
    return html_table(
        f"{r.preset} ({r.weights} weights) on {escape(r.device)}: the KV cache the engine built in "
        f"{r.budget_mib} MiB in each format, the requests of {tokens:,} tokens it admits, and "
        f"a decode step at batch {r.batch_size} (median of the steps timed)",
        ["format", f"{r.block_size}-token block (bytes)",
         "fp8 block by the formula (bytes)", "blocks in the budget",
         f"requests of {tokens:,} tokens that fit", "decode step (ms)"],
        rows, numeric=[False, True, True, True, True, False])


def quality_text(r: KVFormatsResult) -> str:
    q = r.quality
    float_name = next((f.kv_dtype for f in r.formats if f.kv_dtype != "fp8"), "float")
    return (f"<p><strong>Quality, measured on the trained {escape(q.preset)} model:</strong> over "
            f"{q.positions:,} next-token predictions in {q.windows} held-out windows of the "
            f"corpus, read through each cache, the fp8 cache picks the same top token as the "
            f"{escape(float_name)} cache at {100 * q.agreement:.1f}% of them; the largest difference "
            f"between their logits is {sig(q.max_logit_diff)}; the held-out loss is "
            f"{q.loss_float:.4f} nats with {escape(float_name)} and {q.loss_fp8:.4f} with fp8. "
            "Both caches ran the same windows on the same model: the figures are compared "
            "directly, not estimated.</p>")


def hybrid_table(r: KVFormatsResult) -> str:
    """By context length: bytes per token and requests that fit, full against hybrid."""
    by = {(h.preset, h.tokens): h for h in r.hybrid}
    hybrid = next((h for h in r.hybrid if h.window), None)
    if hybrid is None:
        return ""
    full_name = next((h.preset for h in r.hybrid if not h.window), "full")
    rows = []
    for tokens in sorted({h.tokens for h in r.hybrid}):
        full, win = by.get((full_name, tokens)), by.get((hybrid.preset, tokens))
        if full is None or win is None:
            continue
        rows.append([f"{tokens:,}", f"{full.bytes_per_token:,.0f}", f"{win.bytes_per_token:,.0f}",
                     f"{win.formula_bytes_per_token:,.0f}", f"{full.requests_fit:,}",
                     f"{win.requests_fit:,}", f"{max(0, tokens - win.window):,}"])
    return html_table(
        f"{hybrid.preset} (every other layer windowed to {hybrid.window} tokens) against "
        f"{full_name}'s full attention, {r.budget_mib} MiB: one sequence grown through each "
        "engine's block manager to each length; bytes are the blocks it held at the end, "
        "requests that fit divide the pool by the most blocks it held at once",
        ["context (tokens)", "bytes per token, full", "bytes per token, hybrid",
         "hybrid by the formula (window at its fullest)", "requests that fit, full",
         "requests that fit, hybrid", "tokens the window layers cannot see"],
        rows, numeric=[True] * 7)


def formats_sentence(r: KVFormatsResult) -> str:
    """The section's measurement in one sentence, for screen readers."""
    by = {f.kv_dtype: f for f in r.formats}
    fp8 = by.get("fp8")
    base = next((f for f in r.formats if f.kv_dtype != "fp8"), None)
    if fp8 is None or base is None:
        return "The KV formats were measured."
    return (f"The KV formats measured: in {r.budget_mib} MiB, {fp8.requests_fit:,} requests fit "
            f"with fp8 against {base.requests_fit:,} with {base.kv_dtype}; a decode step took "
            f"{sig(fp8.step_ms)} ms against {sig(base.step_ms)} ms; fp8 picked the same top "
            f"token at {100 * r.quality.agreement:.1f}% of positions.")


def formats_html(r: KVFormatsResult | None) -> str:
    if r is None:
        return WAITING
    return fp8_table(r) + quality_text(r) + hybrid_table(r)


def formats_rows(r: KVFormatsResult | None) -> list[dict]:
    """Every figure of the section, one row per format or per preset and length."""
    if r is None:
        return []
    rows = [{"table": "format", "format": f.kv_dtype, "preset": r.preset,
             "bytes_per_block": f.bytes_per_block, "blocks": f.blocks,
             "requests_fit": f.requests_fit, "tokens": r.prompt_len + r.new_tokens,
             "step_ms": f.step_ms, "step_ms_ci_lo": f.step_ms_lo, "step_ms_ci_hi": f.step_ms_hi,
             "steps_timed": f.steps_timed} for f in r.formats]
    q = r.quality
    rows.append({"table": "quality", "format": "fp8", "preset": q.preset,
                 "agreement": q.agreement, "max_logit_diff": q.max_logit_diff,
                 "loss_float": q.loss_float, "loss_fp8": q.loss_fp8,
                 "positions": q.positions})
    rows += [{"table": "hybrid", "preset": h.preset, "window": h.window, "tokens": h.tokens,
              "bytes_per_block": h.bytes_per_block, "blocks": h.blocks_held,
              "blocks_most": h.blocks_most, "bytes_per_token": h.bytes_per_token,
              "formula_bytes_per_token": h.formula_bytes_per_token,
              "requests_fit": h.requests_fit} for h in r.hybrid]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k) for k in keys} for row in rows]
