"""The OpenAI API's requests, checked as vLLM checks them, and its response objects.

Request bodies are pydantic models in strict mode, so a wrong type (a string for max_tokens, a
number for the prompt) is refused rather than coerced; fields this server does not know are
ignored, as vLLM ignores them. `settings` turns a parsed request into what the engine needs and
raises APIError (HTTP 400, or 404 for an unknown model, as vLLM answers) with an OpenAI-style
error object for anything the engine cannot honour: a prompt that fills the context, max_tokens
below 1 or past the context, sampling values out of range, features this server does not have
(several choices, log-probabilities, penalties, tools).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, ValidationError

from ..sampler import SamplingParams

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
SEED_LIMIT = 2**63  # torch generators take seeds below 2**64; stay well inside


class APIError(Exception):
    """A request the server refuses: status, OpenAI error type, message, offending parameter."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError",
                 param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        self.param = param
        self.headers = headers  # e.g. Retry-After on a 429

    def to_json(self) -> dict:
        return error_object(self.message, self.kind, self.status, self.param)


def error_object(message: str, kind: str, code: int, param: str | None = None) -> dict:
    """The error body OpenAI and vLLM send: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# ---- request bodies ------------------------------------------------------------------------------
class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class _Generation(_Body):
    """The fields both endpoints share. None means "not given" (the default applies)."""

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # vLLM's extension: 0 or -1 switch it off
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension: forced output lengths, for benchmarks
    return_token_ids: bool = False  # vLLM's extension: the prompt's and output's token ids
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None  # vLLM's extension
    logit_bias: dict | None = None
    user: str | None = None  # the tenant whose quota a request draws on (serve --classes)
    # serve --classes: the request's traffic class. OpenAI's service_tier names it ("auto" and
    # "default": the first class), our traffic_class too; the X-Traffic-Class header wins.
    service_tier: str | None = None
    traffic_class: str | None = None


class CompletionRequest(_Generation):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None
    best_of: int | None = None


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(_Generation):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list | None = None


def parse(model: type[BaseModel], body: bytes) -> BaseModel:
    """A request body as model, or APIError naming what is wrong (malformed JSON included)."""
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        problems = []
        for err in e.errors()[:3]:
            where = ".".join(str(p) for p in err["loc"])
            problems.append(f"{where}: {err['msg']}" if where else err["msg"])
        first = e.errors()[0]["loc"] if e.errors() else ()
        raise APIError("; ".join(problems), param=str(first[0]) if first else None) from None


# ---- prompts -------------------------------------------------------------------------------------
def completion_prompt(prompt, encode, vocab: int) -> list[int]:
    """One prompt's token ids: text (tokenized here) or a list of token ids, alone or as the one
    item of a list. Several prompts in one request are refused (one choice per request)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise APIError("one prompt per request: this server does not batch prompts in one "
                           "request (send them as separate requests; it batches those)",
                           param="prompt")
        prompt = prompt[0]
    ids = encode(prompt) if isinstance(prompt, str) else list(prompt)
    if not ids:
        raise APIError("the prompt is empty: give at least one token", param="prompt")
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise APIError(f"token id {bad[0]} is outside the vocabulary [0, {vocab})",
                       param="prompt")
    return ids


def chat_text(messages: list[ChatMessage]) -> str:
    """The tiny model's chat template: each message as "Role: content" in a paragraph of its
    own, then "Assistant:" for the model to continue (it was trained on plain text, not chats)."""
    if not messages:
        raise APIError("messages is empty: give at least one message", param="messages")
    paragraphs = []
    for m in messages:
        if m.role not in CHAT_ROLES:
            raise APIError(f"unknown role {m.role!r}: use one of {', '.join(CHAT_ROLES)}",
                           param="messages")
        if isinstance(m.content, list):
            if any(part.type != "text" or part.text is None for part in m.content):
                raise APIError("only text content parts are supported", param="messages")
            content = "".join(part.text for part in m.content)
        else:
            content = m.content or ""
        paragraphs.append(f"{m.role.capitalize()}: {content}")
    return "\n\n".join(paragraphs) + "\n\nAssistant:"


# ---- what the engine needs -----------------------------------------------------------------------
@dataclass
class Settings:
    """A checked request, as the engine takes it."""

    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False


def _unsupported(req: _Generation) -> None:
    """Refuse features this engine does not have rather than silently ignore them."""
    checks = [("n", req.n != 1, "n must be 1: one choice per request"),
              ("presence_penalty", req.presence_penalty not in (None, 0), None),
              ("frequency_penalty", req.frequency_penalty not in (None, 0), None),
              ("repetition_penalty", req.repetition_penalty not in (None, 1), None),
              ("logit_bias", bool(req.logit_bias), None)]
    if isinstance(req, CompletionRequest):
        checks += [("echo", req.echo, None), ("suffix", req.suffix is not None, None),
                   ("logprobs", req.logprobs is not None, None),
                   ("best_of", req.best_of not in (None, 1), None)]
    else:
        checks += [("logprobs", bool(req.logprobs), None),
                   ("top_logprobs", req.top_logprobs is not None, None),
                   ("tools", bool(req.tools), None)]
    for param, bad, message in checks:
        if bad:
            raise APIError(message or f"{param} is not supported by this server", param=param)


def settings(req: _Generation, prompt_ids: list[int], context: int) -> Settings:
    """Check a parsed request against the model's context and the sampler's ranges (vLLM's
    messages where vLLM has one) and return what the engine needs."""
    _unsupported(req)
    n = len(prompt_ids)
    if n >= context:
        raise APIError(f"This model's maximum context length is {context} tokens. However, "
                       f"your request has {n} input tokens. Please reduce the length of the "
                       "input.", param="input_tokens")
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        max_tokens = req.max_completion_tokens
    if max_tokens is None:
        max_tokens = context - n  # vLLM's default: whatever the context has left
    if max_tokens < 1:
        raise APIError(f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if n + max_tokens > context:
        raise APIError(f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. "
                       f"This model's maximum context length is {context} tokens and your "
                       f"request has {n} input tokens ({max_tokens} > {context} - {n}).",
                       param="max_tokens")
    temperature = 1.0 if req.temperature is None else req.temperature
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise APIError(f"temperature must be 0 or more, got {temperature}.", param="temperature")
    top_p = 1.0 if req.top_p is None else req.top_p
    if not 0 < top_p <= 1:
        raise APIError(f"top_p must be in (0, 1], got {top_p}.", param="top_p")
    top_k = req.top_k or 0
    if top_k < -1:
        raise APIError(f"top_k must be -1 or 0 (off) or at least 1, got {top_k}.",
                       param="top_k")
    seed = req.seed
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise APIError(f"seed must be in [0, 2**63), got {seed}.", param="seed")
    if seed is None:
        seed = secrets.randbelow(SEED_LIMIT)  # unseeded: a fresh draw, as OpenAI does
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if any(s == "" for s in stop):
        raise APIError("stop strings must not be empty", param="stop")
    if req.stream_options is not None and not req.stream:
        raise APIError("Stream options can only be defined when `stream=True`.",
                       param="stream_options")
    return Settings(
        prompt_ids=prompt_ids, max_tokens=max_tokens,
        sampling=SamplingParams(temperature, max(top_k, 0), top_p, seed), stop=stop,
        ignore_eos=req.ignore_eos, stream=req.stream,
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        return_token_ids=req.return_token_ids,
    )


# ---- responses -----------------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@dataclass
class Reply:
    """Builds one response's objects: the whole answer, or its stream's chunks. With
    prompt_ids set (return_token_ids), each choice also carries its token ids, as vLLM's do."""

    chat: bool
    model: str
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    include_usage: bool = False
    prompt_ids: list[int] | None = None
    started: bool = False  # a chat stream names the role in its first chunk

    def __post_init__(self):
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _choice(self, text: str, finish_reason: str | None, token_ids: list[int],
                delta: bool) -> dict:
        if not self.chat:
            choice = {"index": 0, "text": text}
        elif delta:
            choice = {"index": 0, "delta": {"content": text} if self.started else
                      {"role": "assistant", "content": text}}
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        choice.update(logprobs=None, finish_reason=finish_reason)
        if self.prompt_ids is not None:
            if not self.started:
                choice["prompt_token_ids"] = self.prompt_ids
            choice["token_ids"] = token_ids
        return choice

    def whole(self, text: str, finish_reason: str, token_ids: list[int],
              prompt_tokens: int, completion_tokens: int) -> dict:
        head = self._head("chat.completion" if self.chat else "text_completion")
        return {**head, "choices": [self._choice(text, finish_reason, token_ids, delta=False)],
                "usage": usage(prompt_tokens, completion_tokens)}

    def chunk(self, text: str, finish_reason: str | None, token_ids: list[int]) -> str:
        """One step's server-sent event (one token)."""
        head = self._head("chat.completion.chunk" if self.chat else "text_completion")
        body = {**head, "choices": [self._choice(text, finish_reason, token_ids, delta=True)]}
        self.started = True
        if self.include_usage:
            body["usage"] = None
        return sse(body)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> str:
        """The last event before [DONE] when stream_options.include_usage is set."""
        head = self._head("chat.completion.chunk" if self.chat else "text_completion")
        return sse({**head, "choices": [], "usage": usage(prompt_tokens, completion_tokens)})


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


SSE_DONE = "data: [DONE]\n\n"
