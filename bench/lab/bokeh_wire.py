"""The Bokeh server's websocket protocol as the class bench's students speak it: messages as JSON
fragments, the UI events a browser sends, whole messages from fragments, and serialized values
as plain Python (bench/lab/students.py)."""

from __future__ import annotations

import base64
import itertools
import json

import numpy as np

_msgids = itertools.count(1)


def message(msgtype: str, content: dict) -> list[str]:
    """A Bokeh protocol message as its three text fragments (header, metadata, content), as the
    Bokeh client writes them (no buffers: nothing a student sends holds binary data)."""
    header = {"msgid": f"s{next(_msgids)}", "msgtype": msgtype, "num_buffers": 0}
    return [json.dumps(header), "{}", json.dumps(content, separators=(",", ":"))]


def bokeh_event(name: str, values: dict | None = None) -> dict:
    """A PATCH-DOC content carrying a UI event (bokeh.events) as BokehJS sends it."""
    entries = {"entries": [[k, v] for k, v in values.items()]} if values else {}
    return {"events": [{"kind": "MessageSent", "msg_type": "bokeh_event",
                        "msg_data": {"type": "event", "name": name,
                                     "values": {"type": "map", **entries}}}]}


def document_ready() -> dict:
    """The browser's "the page has loaded": Panel's onload callbacks run on it."""
    return bokeh_event("document_ready")


def button_click(model_id: str) -> dict:
    return bokeh_event("button_click", {"model": {"id": model_id}})


def model_changed(model_id: str, attr: str, new) -> dict:
    return {"events": [{"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr,
                        "new": new}]}


class Assembler:
    """Whole messages from websocket fragments: header, metadata and content (JSON text), then
    for each buffer the header says it has, a buffer header (JSON) and its bytes."""

    def __init__(self) -> None:
        self._parts: list = []
        self._buffers: dict[str, bytes] = {}
        self._buffer_id: str | None = None

    def consume(self, fragment: str | bytes) -> dict | None:
        """The message this fragment completes ({"header", "content", "buffers"}), else None."""
        if len(self._parts) < 3:
            self._parts.append(json.loads(fragment))
        elif self._buffer_id is None:
            self._buffer_id = json.loads(fragment)["id"]
        else:
            self._buffers[self._buffer_id] = fragment
            self._buffer_id = None
        if len(self._parts) < 3 or len(self._buffers) < self._parts[0].get("num_buffers", 0):
            return None
        (header, _, content), buffers = self._parts, self._buffers
        self._parts, self._buffers = [], {}
        return {"header": header, "content": content, "buffers": buffers}


def decode(value, buffers: dict[str, bytes]):
    """Bokeh's serialized values as plain Python: maps as dicts, arrays as lists (their bytes
    inline in base64 or in the message's buffers), numbers such as NaN as floats; model
    references and anything else as they came."""
    if isinstance(value, list):
        return [decode(v, buffers) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if kind == "map":
        return {decode(k, buffers): decode(v, buffers) for k, v in value.get("entries", [])}
    if kind == "number":
        return float(value["value"])
    if kind in ("ndarray", "typed_array"):
        raw = value["array"]["data"]
        data = buffers[raw["id"]] if isinstance(raw, dict) else base64.b64decode(raw)
        return np.frombuffer(data, dtype=value["dtype"]).tolist()
    return value


def walk_objects(value, found: dict[str, dict]) -> None:
    """Every model definition ({"type": "object", "id", "name", "attributes"}) inside a
    document's or a patch's JSON, by id; a model seen again is a bare {"id"} reference."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            if v.get("type") == "object" and "id" in v:
                found[v["id"]] = v
            if v.get("type") not in ("ndarray", "typed_array", "bytes"):
                stack.extend(v.values())
