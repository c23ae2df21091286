"""Chat models over HTTP: Ollama `POST /api/chat` and OpenAI-compatible `POST /v1/chat/completions`.

    model = chat_model_from_config(config, env=os.environ)      # None when memory.llm is absent
    text = model.complete(messages, response_format_json=True, output=EXTRACTION_OUTPUT)

One small contract (`ChatModel`) that maintenance workers and capture share. Calls are
deterministic (temperature 0), bounded by `memory.llm.timeoutMs` per call, and use the shared
transport (`post_raw`: no redirects, no proxy for loopback, size-capped). They ask for a
streamed answer, read to its end and assembled (`chat_stream.py`): at the deadline the client
hangs up, and a streaming server stops generating then (a non-streaming one would go on to its
token cap, and each retry would start another). A
completion over 262,144 characters is refused before anyone parses it. Every transport failure
is `ProviderUnavailable` naming the server and the fix.

Bounded, constrained generation. With an `OutputSpec` (capture's two answers) the request
carries the answer's JSON Schema as a constraint (Ollama `format: <schema>`; OpenAI-compatible
`response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict": true}}`)
and a token cap sized from the answer's own bounds (`num_predict` / `max_tokens`), so a
degenerate answer stops at the cap instead of filling the context. An answer the server cut at
the cap (`done_reason` / `finish_reason` "length") is `CompletionCutOff`, an invalid model
output: it is never parsed as a partial. JSON mode also sends the stop sequence "\\n\\n\\n": JSON
never needs three raw newlines in a row (a newline inside a string is escaped), and runs of
blank lines are how small models degenerate under a plain JSON grammar.

A server that rejects the way the schema is sent (HTTP 400 or 422, or a 5xx whose message names
`response_format` / `json_schema` / `format`: llama-cpp-python's server answers a `json_schema`
request with a 500 validation error) is asked again at once one step down this ladder, and this
client stays on the step that worked; each step down is logged and its reason kept in
`schema_fallback`:

    OpenAI-compatible: json_schema (strict) → json_object + "schema" (llama-cpp-python's own
                       form, still constrained by the schema) → plain json_object
    Ollama:            format: <schema> → format: "json"

Models without a system role. Some chat templates (Gemma's) have no system role and drop the
system message, so the model never sees the rules. `system_role="fold"` puts the system prompt
at the top of the first user message instead; `"auto"` (the default) folds for model names in
`FOLD_BY_DEFAULT` and sends a system message otherwise.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from memvault.indexer.search.http_json import HttpTarget, post_raw
from memvault.indexer.services.chat_stream import assemble
from memvault.vault.capture.fields import ModelOutputInvalid
from memvault.vault.capture.schema import OutputSpec
from memvault.vault.errors import ProviderUnavailable
from memvault.vault.limits import MAX_COMPLETION_UTF16, completion_length, completion_overflow

#: the answer's JSON around a completion: a maximal completion is at most 6 bytes a UTF-16 unit
#: once escaped (\uXXXX); anything larger cannot hold an acceptable completion
MAX_ANSWER_BYTES = MAX_COMPLETION_UTF16 * 6 + 64 * 1024
#: what one streamed event may add around its token (ids, model name, timestamps): a stream of
#: `cap` tokens is allowed `cap` times this on top of MAX_ANSWER_BYTES
MAX_STREAM_EVENT_BYTES = 1024
#: the token cap of a call that names no OutputSpec (runtime compaction): generous, but a cap
DEFAULT_MAX_TOKENS = 8192
JSON_STOP = ["\n\n\n"]
#: model names whose usual chat template has no system role (matched case-insensitively)
FOLD_BY_DEFAULT = re.compile(r"gemma", re.IGNORECASE)
SYSTEM_ROLES = ("auto", "system", "fold")
_ROLES = ("system", "user", "assistant")
_SCHEMA_REJECTED = (400, 422)
log = logging.getLogger(__name__)


class CompletionCutOff(ModelOutputInvalid):
    """The server stopped the answer at the token cap: incomplete, never parsed."""


class ChatModel(Protocol):
    """Anything that turns a conversation into one completion (a loopback fake satisfies it)."""

    def complete(
        self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool, output: OutputSpec | None = None
    ) -> str: ...


class HttpChatModel:
    def __init__(
        self,
        provider: str,
        endpoint: str,
        model: str,
        *,
        timeout_ms: int = 60_000,
        api_key: str | None = None,
        system_role: str = "auto",
    ) -> None:
        if provider not in ("ollama", "openai"):
            raise ProviderUnavailable(
                f"chat provider {provider!r} is not supported: set memory.llm.provider to ollama or openai"
            )
        if system_role not in SYSTEM_ROLES:
            raise ProviderUnavailable(
                f"memory.llm.systemRole {system_role!r} is not supported: use auto, system or fold"
            )
        self.provider = provider
        self.model = model
        self.timeout_s = timeout_ms / 1000.0
        self.fold_system = system_role == "fold" or (system_role == "auto" and bool(FOLD_BY_DEFAULT.search(model)))
        #: why this client stepped down the schema ladder, every step (None while the server accepts the first)
        self.schema_fallback: str | None = None
        #: how the schema is sent now: an index into SCHEMA_FORMS[provider] (moves down on refusals only)
        self.schema_mode = 0
        self._api_key = api_key
        base = endpoint.rstrip("/")
        if provider == "ollama":
            self.url = base + "/api/chat"
        else:
            self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self._target_fields = dict(
            name=f"{provider} chat (model {model})",
            config_key="memory.llm.endpoint",
            start_hint="start Ollama (`ollama serve`)"
            if provider == "ollama"
            else "check the OpenAI-compatible server is running",
            not_found_hint=(
                f"is the model pulled? run `ollama pull {model}`"
                if provider == "ollama"
                else "check memory.llm.endpoint (it usually ends in /v1) and the model name"
            ),
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"HttpChatModel({self.provider} {self.model} at {self.url})"

    def complete(
        self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool, output: OutputSpec | None = None
    ) -> str:
        checked = _checked(messages)
        if self.fold_system:
            checked = fold_system_prompt(checked)
        json_mode = response_format_json or output is not None
        while True:
            mode = SCHEMA_FORMS[self.provider][self.schema_mode] if output is not None else "json"
            try:
                return self._call(checked, json_mode, output, mode)
            except ProviderUnavailable as exc:
                if mode == "json" or not _refuses_schema(exc):
                    raise
                self.schema_mode += 1
                step = (f"the server refused response format {mode!r} ({str(exc)[:240]}); "
                        f"now using {SCHEMA_FORMS[self.provider][self.schema_mode]!r}")  # fmt: skip
                self.schema_fallback = step if self.schema_fallback is None else f"{self.schema_fallback}; {step}"
                log.warning("%s: %s", self._target_fields["name"], step)

    def _call(self, messages: list[dict], json_mode: bool, output: OutputSpec | None, mode: str) -> str:
        # the shared transport lives beside the embedding client, which imports numpy: load it
        # only when a model is actually called, so commands that never call one start fast

        payload = self._payload(messages, json_mode, output, mode)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        target = HttpTarget(**self._target_fields)
        cap = output.max_tokens if output is not None else DEFAULT_MAX_TOKENS
        raw = post_raw(self.url, payload, target=target, timeout_s=self.timeout_s, headers=headers,
                       max_bytes=MAX_ANSWER_BYTES + cap * MAX_STREAM_EVENT_BYTES)  # fmt: skip
        text, stop_reason = self._content(assemble(raw, self.provider, f"{target.name} at {self.url}"))
        length = completion_overflow(text)
        if length is not None:
            raise self._fail(f"the completion is {length} characters, over the {MAX_COMPLETION_UTF16} limit")
        if stop_reason == "length":
            field = "done_reason" if self.provider == "ollama" else "finish_reason"
            raise CompletionCutOff(
                f"the answer was cut off at the {cap}-token cap ({field} length) after "
                f"{completion_length(text)} characters; it is incomplete and was not parsed"
            )
        return text

    def _payload(self, messages: list[dict], json_mode: bool, output: OutputSpec | None, mode: str) -> dict:
        cap = output.max_tokens if output is not None else DEFAULT_MAX_TOKENS
        schema = dict(output.schema) if output is not None else None
        if self.provider == "ollama":
            options: dict[str, Any] = {"temperature": 0, "num_predict": cap}
            payload: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True, "options": options}
            if json_mode:
                payload["format"] = schema if mode == "schema" else "json"
                options["stop"] = list(JSON_STOP)
            return payload
        payload = {"model": self.model, "messages": messages, "temperature": 0, "stream": True, "max_tokens": cap}
        if json_mode:
            payload["stop"] = list(JSON_STOP)
            if mode == "json_schema":
                payload["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": output.name, "schema": schema, "strict": True},
                }
            elif mode == "json_object_schema":
                payload["response_format"] = {"type": "json_object", "schema": schema}
            else:
                payload["response_format"] = {"type": "json_object"}
        return payload

    def _content(self, answer: Any) -> tuple[str, str | None]:
        if isinstance(answer, dict) and answer.get("error"):
            raise self._fail(f"answered error {str(answer['error'])[:200]!r}")
        if self.provider == "ollama":
            message = answer.get("message") if isinstance(answer, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, str):
                raise self._fail(
                    'the answer has no "message.content" text', "check memory.llm.endpoint points at Ollama"
                )
            return content, answer.get("done_reason")
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._fail('the answer has no "choices"')
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._fail('the first choice has no "message.content" text')
        return content, choices[0].get("finish_reason")

    def _fail(self, problem: str, fix: str | None = None) -> ProviderUnavailable:
        fix = fix or f"check that {self.url} serves {self.provider} chat completions for model {self.model}"
        return ProviderUnavailable(f"{self._target_fields['name']} at {self.url}: {problem}: {fix}")


#: the ways the schema can be sent, best first (see the module docstring)
SCHEMA_FORMS = {"openai": ("json_schema", "json_object_schema", "json"), "ollama": ("schema", "json")}
_REFUSAL_WORDS = re.compile(r"response_format|json_schema|\bformat\b|schema", re.IGNORECASE)


def _refuses_schema(exc: ProviderUnavailable) -> bool:
    """A refusal of the request's shape, not an outage: 400/422, or a 5xx that names the format."""
    status = getattr(exc, "http_status", None)
    if status in _SCHEMA_REJECTED:
        return True
    return status is not None and status >= 500 and bool(_REFUSAL_WORDS.search(str(exc)))


def fold_system_prompt(messages: list[dict]) -> list[dict]:
    """The conversation without system messages: their text opens the first user message."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    first_user = next((m for m in rest if m["role"] == "user"), None)
    if first_user is None:
        return [{"role": "user", "content": system}] + rest
    first_user["content"] = f"{system}\n\n{first_user['content']}"
    return rest


def _checked(messages: Sequence[Mapping[str, str]]) -> list[dict]:
    out = []
    for message in messages:
        if (
            not isinstance(message, Mapping)
            or message.get("role") not in _ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise ProviderUnavailable(
                "a chat message must be {role: system|user|assistant, content: text}: fix the caller"
            )
        out.append({"role": message["role"], "content": message["content"]})
    if not out:
        raise ProviderUnavailable("a chat request needs at least one message: fix the caller")
    return out


def chat_model_from_config(config: Any, env: Mapping[str, str]) -> HttpChatModel | None:
    """The chat model `config.memory.llm` names, or None when the config has no llm block.

    `env` is passed in (library code never reads the environment): the API key is read from the
    variable `memory.llm.apiKeyEnv` names, and a named but unset variable is an error.
    """
    llm = getattr(config.memory, "llm", None)
    if llm is None:
        return None
    api_key = None
    if llm.api_key_env:
        api_key = env.get(llm.api_key_env)
        if not api_key:
            raise ProviderUnavailable(
                f"memory.llm.apiKeyEnv names {llm.api_key_env}, which is not set: export {llm.api_key_env}=<key>"
            )
    return HttpChatModel(llm.provider, llm.endpoint, llm.model, timeout_ms=llm.timeout_ms, api_key=api_key,
                         system_role=getattr(llm, "system_role", "auto"))  # fmt: skip
