"""Build the training corpus of the tiny model (assets/corpus/corpus.txt) from text on this machine.

The tiny model must write readable English, and its training data must be licence-clean and
reproducible without a network. So the corpus is assembled from text that Python itself ships (the
language reference topics in `pydoc_data.topics` and the standard library's docstrings, both under
the PSF licence) plus the Jargon File, a public-domain English lexicon that Debian packages as
dict-jargon (read from its dictd database when installed). Docstrings are read from source files
with `ast`, never by importing modules, so building the corpus runs no library code. Every
paragraph is cleaned (whitespace normalized, doctests, tables and code dropped, non-English and
very short fragments dropped), repeated paragraphs are removed, and documents are written in an
order fixed by a hash of their text (which mixes the sources, so any slice of the file, such as
the held-out tail, looks like the whole), each followed by <|endoftext|>. Rebuilding with the same
Python version and packages gives the same file byte for byte; the file is committed, so nothing
here runs when the engine starts. Run `python -m engine.training.corpus`.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import pkgutil
import re
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import ASSETS
from ..tokenizer import EOS_TOKEN

CORPUS_DIR = ASSETS / "corpus"
CORPUS_FILE = CORPUS_DIR / "corpus.txt"
SOURCES_FILE = CORPUS_DIR / "SOURCES.md"
MAX_BYTES = 5_000_000
DICTD_DIR = Path("/usr/share/dictd")

# Standard-library modules whose docstrings are tests, demos, GUI boilerplate, codec tables or
# machine-generated text rather than prose about Python.
SKIP_MODULES = (
    "test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "encodings",
    "pydoc_data", "site-packages", "dist-packages", "__phello__", "__hello__", "antigravity",
    "this", "config-", "lib-dynload", "_sysconfigdata",
)
MIN_PARAGRAPH_WORDS = 4
MIN_DOCUMENT_CHARS = 200
PACK_CHARS = 2500  # lexicon entries are packed into documents of about this size

_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'",
                         "\u00a0": " ", "\t": " "})
_UNDERLINE = re.compile(r"^\s*([=*~^\-#+`'\"])\1{2,}\s*$")
_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |return |raise |yield |print\(|for .* in .*:$|"
    r"if .*:$|while .*:$|with .*:$|try:$|except|else:$|elif |@\w|#|\.\.\. |[\w.\[\]]+ ?[-+*/]?= )"
)
_WORD = re.compile(r"^[A-Za-z][a-z]*[.,;:!?)]*$")


@dataclass
class Source:
    """One origin of corpus text, with what SOURCES.md says about it."""

    name: str
    licence: str
    origin: str
    documents: list[str]


def normalize(text: str) -> str:
    """Typographic quotes to ASCII, tabs and no-break spaces to spaces, trailing space dropped."""
    lines = (line.rstrip() for line in text.translate(_QUOTES).splitlines())
    return "\n".join(lines)


def split_paragraphs(text: str) -> list[str]:
    """Blocks of text separated by blank lines."""
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def looks_like_code(lines: list[str]) -> bool:
    """True for doctests, tables, grammar rules and blocks that read as code, not prose."""
    if any(line.lstrip().startswith((">>>", "+--", "+==", "|", "::=")) for line in lines):
        return True
    if any("::=" in line for line in lines):
        return True
    code = sum(bool(_CODE_LINE.match(line)) for line in lines)
    if code / len(lines) > 0.3:
        return True
    text = " ".join(lines)
    symbols = sum(text.count(c) for c in "()[]{}=<>_\\|#@$%^&~;`")
    return symbols / max(len(text), 1) > 0.06


def is_english(text: str) -> bool:
    """Mostly ASCII and mostly plain words (a cheap filter, not a language detector)."""
    ascii_share = sum(c.isascii() for c in text) / max(len(text), 1)
    tokens = text.split()
    words = sum(bool(_WORD.match(t.strip("\"'(*"))) for t in tokens)
    return ascii_share > 0.97 and len(tokens) >= MIN_PARAGRAPH_WORDS and words / len(tokens) > 0.6


def clean_paragraph(block: str) -> str | None:
    """A paragraph reflowed as one line of prose, or None when it is not prose."""
    lines = [line for line in block.splitlines() if line.strip() and not _UNDERLINE.match(line)]
    if not lines or looks_like_code(lines):
        return None
    text = " ".join(" ".join(lines).split())
    return text if is_english(text) else None


def clean_document(text: str) -> str:
    """The cleaned paragraphs of a text, separated by blank lines."""
    paragraphs = (clean_paragraph(block) for block in split_paragraphs(normalize(text)))
    return "\n\n".join(p for p in paragraphs if p)


def pydoc_topics() -> list[str]:
    """The language reference's topics (`help('topics')` in the interpreter), one per document."""
    from pydoc_data.topics import topics

    return [clean_document(topics[name]) for name in sorted(topics)]


def _skipped(name: str) -> bool:
    return any(part.startswith(SKIP_MODULES) for part in name.split("."))


def stdlib_sources(root: Path, prefix: str = "") -> Iterator[tuple[str, Path]]:
    """(module name, source file) of every pure-Python stdlib module, in sorted order, found with
    pkgutil on the file system (nothing is imported)."""
    for info in sorted(pkgutil.iter_modules([str(root)]), key=lambda m: m.name):
        name = prefix + info.name
        if _skipped(name):
            continue
        if info.ispkg:
            init = root / info.name / "__init__.py"
            if init.exists():
                yield name, init
            yield from stdlib_sources(root / info.name, name + ".")
        elif (root / f"{info.name}.py").exists():
            yield name, root / f"{info.name}.py"


def module_docstrings(path: Path) -> list[str]:
    """Docstrings of a module and its classes and functions, in source order."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = [tree] + [
        node for node in ast.walk(tree)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    nodes.sort(key=lambda node: getattr(node, "lineno", 0))
    docs = (ast.get_docstring(node, clean=True) for node in nodes)
    return [doc for doc in docs if doc]


def stdlib_docstrings() -> list[str]:
    """One document per standard-library module: its cleaned docstrings joined."""
    root = Path(sysconfig.get_paths()["stdlib"])
    documents = []
    for _name, path in stdlib_sources(root):
        parts = [clean_document(doc) for doc in module_docstrings(path)]
        documents.append("\n\n".join(part for part in parts if part))
    return documents


def _b64(value: str) -> int:
    """dictd's index numbers: base 64 with the alphabet A-Z a-z 0-9 + /."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    number = 0
    for char in value:
        number = number * 64 + alphabet.index(char)
    return number


def dictd_entries(name: str) -> list[tuple[str, str]]:
    """(headword, entry text) of a dictd database in /usr/share/dictd, in file order; empty when
    the Debian package that holds it is not installed."""
    index, data = DICTD_DIR / f"{name}.index", DICTD_DIR / f"{name}.dict.dz"
    if not (index.exists() and data.exists()):
        return []
    raw = gzip.decompress(data.read_bytes())
    spans = set()
    entries = []
    for line in index.read_text(encoding="utf-8").splitlines():
        head, offset, length = line.split("\t")[:3]
        span = (_b64(offset), _b64(length))
        if head.startswith("00") or span in spans:
            continue
        spans.add(span)
        entries.append((span, head, raw[span[0]:span[0] + span[1]].decode("utf-8")))
    return [(head, text) for _span, head, text in sorted(entries)]


def pack(entries: Iterable[str], target: int = PACK_CHARS) -> list[str]:
    """Consecutive short entries joined into documents of about `target` characters."""
    documents, current = [], []
    for entry in entries:
        current.append(entry)
        if sum(len(e) for e in current) >= target:
            documents.append("\n\n".join(current))
            current = []
    if current:
        documents.append("\n\n".join(current))
    return documents


def jargon_file() -> list[str]:
    """The Jargon File 4.4.7: "headword: definition", cross-reference braces removed."""
    entries = []
    for head, text in dictd_entries("jargon"):
        body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        body = clean_document(re.sub(r"[{}]", "", body))
        if body:
            entries.append(f"{head.strip()}: {body}")
    return pack(entries)


def collect_sources() -> list[Source]:
    """Every source, in a fixed order (earlier sources win when documents repeat)."""
    return [
        Source("Python language reference topics (pydoc_data.topics)",
               "PSF License Agreement (Python Software Foundation License)",
               "the `pydoc_data.topics` module of the Python standard library", pydoc_topics()),
        Source("Python standard library docstrings",
               "PSF License Agreement (Python Software Foundation License)",
               "module, class and function docstrings of the standard library's .py files, "
               "read with ast", stdlib_docstrings()),
        Source("The Jargon File, version 4.4.7 (29 Dec 2003)",
               "public domain (dedicated by its editors)",
               "Debian package dict-jargon, /usr/share/dictd/jargon.dict.dz", jargon_file()),
    ]


def dedupe(sources: list[Source]) -> None:
    """Drop repeated paragraphs (first occurrence wins), then documents that became too short."""
    seen: set[str] = set()
    for source in sources:
        kept = []
        for document in source.documents:
            paragraphs = []
            for paragraph in document.split("\n\n"):
                key = " ".join(paragraph.lower().split())
                if key not in seen:
                    seen.add(key)
                    paragraphs.append(paragraph)
            text = "\n\n".join(paragraphs).strip()
            if len(text) >= MIN_DOCUMENT_CHARS:
                kept.append(text)
        source.documents = kept


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ordered_documents(sources: list[Source], max_bytes: int = MAX_BYTES) -> list[str]:
    """All documents in hash order, the largest-hash ones dropped if the file would exceed
    max_bytes."""
    documents = sorted((d for s in sources for d in s.documents), key=_digest)
    kept, size = [], 0
    for document in documents:
        size += len(document.encode("utf-8")) + len(EOS_TOKEN)
        if size > max_bytes:
            break
        kept.append(document)
    return kept


def corpus_text(documents: list[str]) -> str:
    """Documents each followed by the end-of-text token."""
    return "".join(document + EOS_TOKEN for document in documents)


def read_documents(path: Path = CORPUS_FILE) -> list[str]:
    """The documents of a corpus file, in file order."""
    text = path.read_text(encoding="utf-8")
    return [d for d in text.split(EOS_TOKEN) if d.strip()]


def sources_markdown(sources: list[Source], documents: list[str]) -> str:
    """SOURCES.md: each source, its licence and origin, and how much of the corpus it gave."""
    shipped = set(documents)
    lines = [
        "# Sources of the tiny model's training corpus",
        "",
        "`corpus.txt` is built by `python -m engine.training.corpus` (engine/training/corpus.py) from text available",
        "offline; documents are separated by `<|endoftext|>` and ordered by the SHA-256 of their",
        "text. Paragraphs are cleaned (whitespace normalized; doctests, tables, grammar rules and",
        "code dropped; non-English and very short fragments dropped) and deduplicated.",
        "",
        "| source | licence | origin | documents | bytes |",
        "|---|---|---|---|---|",
    ]
    for s in sources:
        docs = [d for d in s.documents if d in shipped]
        size = sum(len(d.encode("utf-8")) for d in docs)
        lines.append(f"| {s.name} | {s.licence} | {s.origin} | {len(docs)} | {size} |")
    total = len(corpus_text(documents).encode("utf-8"))
    lines += [
        "",
        f"Total: {len(documents)} documents, {total} bytes (UTF-8, separators included).",
        "",
        "The Python texts are from the standard library of the interpreter that built the file",
        "(see the Python version below); both are covered by the PSF License Agreement,",
        "https://docs.python.org/3/license.html. The Jargon File states: \"This document (the",
        "Jargon File) is in the public domain, to be freely used, shared, and modified.\" It is",
        "read from the Debian package `dict-jargon` when installed (`apt-get install dict-jargon`);",
        "without it a rebuild contains only the Python texts.",
        "",
    ]
    return "\n".join(lines)


def build(out_dir: Path = CORPUS_DIR, max_bytes: int = MAX_BYTES) -> list[str]:
    """Collect, clean, dedupe and write corpus.txt and SOURCES.md; returns the documents."""
    import platform

    sources = collect_sources()
    dedupe(sources)
    documents = ordered_documents(sources, max_bytes)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "corpus.txt").write_text(corpus_text(documents), encoding="utf-8")
    notes = sources_markdown(sources, documents)
    notes += f"\nBuilt with Python {platform.python_version()}.\n"
    (out_dir / "SOURCES.md").write_text(notes, encoding="utf-8")
    return documents


def main() -> None:
    documents = build()
    size = CORPUS_FILE.stat().st_size
    print(f"wrote {CORPUS_FILE} ({len(documents)} documents, {size} bytes) and {SOURCES_FILE}")


if __name__ == "__main__":
    main()
