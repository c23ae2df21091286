"""Chat models over HTTP: Ollama `POST /api/chat` and OpenAI-compatible `POST /v1/chat/completions`.

    model = chat_model_from_config(config, env=os.environ)      # None when memory.llm is absent
    text = model.complete([{"role": "user", "content": "..."}], response_format_json=True)

One small contract (`ChatModel`) that maintenance workers and capture share. Calls are
non-streaming, deterministic (temperature 0), bounded by `memory.llm.timeoutMs` per call, and
use the shared transport (`post_json`: no redirects, no proxy for loopback, size-capped). A
completion over 262,144 characters is refused before anyone parses it. Every failure is
`ProviderUnavailable` naming the server and the fix; nothing here retries or falls back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from memvault.vault.errors import ProviderUnavailable

MAX_COMPLETION_CHARS = 262_144
#: the answer's JSON around a completion: a maximal completion is at most 4 bytes a character
#: plus escaping; anything larger cannot hold an acceptable completion
MAX_ANSWER_BYTES = MAX_COMPLETION_CHARS * 6 + 64 * 1024
_ROLES = ("system", "user", "assistant")


class ChatModel(Protocol):
    """Anything that turns a conversation into one completion (a loopback fake satisfies it)."""

    def complete(self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool) -> str: ...


class HttpChatModel:
    def __init__(
        self,
        provider: str,
        endpoint: str,
        model: str,
        *,
        timeout_ms: int = 60_000,
        api_key: str | None = None,
    ) -> None:
        if provider not in ("ollama", "openai"):
            raise ProviderUnavailable(f"chat provider {provider!r} is not supported: set memory.llm.provider to ollama or openai")
        self.provider = provider
        self.model = model
        self.timeout_s = timeout_ms / 1000.0
        self._api_key = api_key
        base = endpoint.rstrip("/")
        if provider == "ollama":
            self.url = base + "/api/chat"
        else:
            self.url = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self._target_fields = dict(
            name=f"{provider} chat (model {model})",
            config_key="memory.llm.endpoint",
            start_hint="start Ollama (`ollama serve`)" if provider == "ollama" else "check the OpenAI-compatible server is running",
            not_found_hint=(
                f"is the model pulled? run `ollama pull {model}`"
                if provider == "ollama"
                else "check memory.llm.endpoint (it usually ends in /v1) and the model name"
            ),
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"HttpChatModel({self.provider} {self.model} at {self.url})"

    def complete(self, messages: Sequence[Mapping[str, str]], *, response_format_json: bool) -> str:
        # the shared transport lives beside the embedding client, which imports numpy: load it
        # only when a model is actually called, so commands that never call one start fast
        from memvault.indexer.search.http_json import HttpTarget, post_json

        payload = self._payload(_checked(messages), response_format_json)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        target = HttpTarget(**self._target_fields)
        answer = post_json(
            self.url, payload, target=target, timeout_s=self.timeout_s, headers=headers, max_bytes=MAX_ANSWER_BYTES
        )
        text = self._content(answer)
        if len(text) > MAX_COMPLETION_CHARS:
            raise self._fail(f"the completion is {len(text)} characters, over the {MAX_COMPLETION_CHARS} limit")
        return text

    def _payload(self, messages: list[dict], json_mode: bool) -> dict:
        if self.provider == "ollama":
            payload: dict[str, Any] = {"model": self.model, "messages": messages, "stream": False,
                                       "options": {"temperature": 0}}  # fmt: skip
            if json_mode:
                payload["format"] = "json"
            return payload
        payload = {"model": self.model, "messages": messages, "temperature": 0, "stream": False}
        if json_mode:
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _content(self, answer: Any) -> str:
        if isinstance(answer, dict) and answer.get("error"):
            raise self._fail(f"answered error {str(answer['error'])[:200]!r}")
        if self.provider == "ollama":
            message = answer.get("message") if isinstance(answer, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, str):
                raise self._fail('the answer has no "message.content" text', "check memory.llm.endpoint points at Ollama")
            return content
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._fail('the answer has no "choices"')
        message = choices[0].get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str):
            raise self._fail('the first choice has no "message.content" text')
        return content

    def _fail(self, problem: str, fix: str | None = None) -> ProviderUnavailable:
        fix = fix or f"check that {self.url} serves {self.provider} chat completions for model {self.model}"
        return ProviderUnavailable(f"{self._target_fields['name']} at {self.url}: {problem}: {fix}")


def _checked(messages: Sequence[Mapping[str, str]]) -> list[dict]:
    out = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES or not isinstance(message.get("content"), str):
            raise ProviderUnavailable("a chat message must be {role: system|user|assistant, content: text}: fix the caller")
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
    return HttpChatModel(llm.provider, llm.endpoint, llm.model, timeout_ms=llm.timeout_ms, api_key=api_key)
