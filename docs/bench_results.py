"""MkDocs hook: publish bench/results/ (the benchmark log) with the site, under results/.

The log lives beside the benchmarks that append to it, outside the docs folder; this adds its
Markdown pages and JSON-lines files to the site so that the docs link to them and a strict
build checks those links like any other.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

BENCH = Path(__file__).resolve().parent.parent / "bench"
SUFFIXES = (".md", ".jsonl")


def on_files(files: Files, config) -> Files:
    """Add every Markdown and JSON-lines file of bench/results/ as results/<name>."""
    results = BENCH / "results"
    for path in sorted(results.glob("*")):
        if path.suffix in SUFFIXES:
            files.append(File(f"results/{path.name}", str(BENCH), config["site_dir"],
                              config["use_directory_urls"]))
    return files
