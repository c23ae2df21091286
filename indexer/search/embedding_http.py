"""Embeddings over HTTP: Ollama (`/api/embed`) and OpenAI-compatible servers (`/embeddings`).

The transport is `http_json.post_json`; this module builds the requests, applies the task
prefixes some models were trained with, and checks every returned row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from memvault.indexer.search.embedding_base import OLLAMA, EmbeddingIdentity, clean_text, normalize_rows
from memvault.indexer.search.http_json import HttpTarget, excerpt, post_json
from memvault.vault.errors import ProviderUnavailable

BATCH_SIZE = 32
_FLOAT32_MAX = float(np.finfo(np.float32).max)


# Models trained with task prefixes; without them, query/document similarity is much worse.
_TASK_PREFIXES = (("nomic-embed-text", "search_query: ", "search_document: "),)


def task_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, document prefix) the model was trained with; empty for most models."""
    lowered = model.lower()
    for marker, query_prefix, document_prefix in _TASK_PREFIXES:
        if marker in lowered:
            return query_prefix, document_prefix
    return "", ""


class HttpEmbeddingProvider:
    """Ollama (`POST {endpoint}/api/embed`) or OpenAI-style (`POST {endpoint}/embeddings`)."""

    def __init__(
        self,
        identity: EmbeddingIdentity,
        endpoint: str,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self.identity = identity
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self.batch_size = max(1, min(batch_size, BATCH_SIZE))
        self._api_key = api_key
        self._ollama = identity.provider == OLLAMA
        self.url = self.endpoint + ("/api/embed" if self._ollama else "/embeddings")
        self._query_prefix, self._document_prefix = task_prefixes(identity.model)
        self._target = HttpTarget(
            name=f"{identity.provider} embeddings (model {identity.model})",
            config_key="memory.embeddings.endpoint",
            start_hint=_START_HINTS[identity.provider],
            not_found_hint=(
                f"is the model pulled? run `ollama pull {identity.model}`"
                if self._ollama
                else "check memory.embeddings.endpoint (it usually ends in /v1) and the model name"
            ),
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"HttpEmbeddingProvider({self.identity.describe()} at {self.url})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self._document_prefix + clean_text(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self._query_prefix + clean_text(text)])[0]

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.identity.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            out[start : start + len(batch)] = self._embed_batch(batch)
        return normalize_rows(out)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        answer = post_json(
            self.url,
            {"model": self.identity.model, "input": batch},
            target=self._target,
            timeout_s=self.timeout_s,
            headers=headers,
        )
        rows = _ollama_rows(answer, self._fail) if self._ollama else _openai_rows(answer, self._fail)
        return self._matrix(rows, len(batch))

    def _fail(self, problem: str, fix: str | None = None) -> ProviderUnavailable:
        fix = fix or f"check that {self.url} serves {self.identity.provider} embeddings for this model"
        return ProviderUnavailable(f"{self._target.name} at {self.url}: {problem}: {fix}")

    def _matrix(self, rows: list[Any], count: int) -> np.ndarray:
        if len(rows) != count:
            raise self._fail(f"returned {len(rows)} vectors for {count} texts")
        dim = self.identity.dim
        for row in rows:
            if not isinstance(row, list):
                raise self._fail(f"an embedding is a {type(row).__name__}, not a list of numbers")
            if len(row) != dim:
                raise ProviderUnavailable(
                    f"{self.identity.provider} model {self.identity.model} at {self.url} returned "
                    f"{len(row)}-dim vectors but memory.embeddings.dim is {dim}: "
                    f"set dim to {len(row)} and run `memvault rebuild`"
                )
            if not {type(value) for value in row} <= {float, int}:
                raise self._fail("an embedding holds something other than numbers")
        matrix = np.array(rows, dtype=np.float64)
        # beyond float32's range a value would turn into infinity in the index
        if not (np.abs(matrix) <= _FLOAT32_MAX).all():  # also false for NaN
            raise self._fail("an embedding holds non-finite numbers (NaN or infinity)")
        return matrix.astype(np.float32)


_START_HINTS = {
    "ollama": "start Ollama (`ollama serve`)",
    "lmstudio": "start the LM Studio server (`lms server start`) and load the embedding model",
    "openai": "check the OpenAI-compatible server is running",
}


def _ollama_rows(answer: Any, fail: Any) -> list[Any]:
    if isinstance(answer, dict) and "embeddings" in answer:
        rows = answer["embeddings"]
        if isinstance(rows, list):
            return rows
        raise fail('"embeddings" is not a list')
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise fail(f"answered error {excerpt(answer['error'].encode())!r}")
    raise fail(
        'the answer has no "embeddings" field',
        "check memory.embeddings.endpoint points at Ollama 0.3.4 or newer (POST /api/embed)",
    )


def _openai_rows(answer: Any, fail: Any) -> list[Any]:
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        if isinstance(answer, dict) and answer.get("error"):
            raise fail(f"answered error {excerpt(json.dumps(answer['error']).encode())!r}")
        raise fail('the answer has no "data" list')
    by_index: dict[int, Any] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or "embedding" not in item:
            raise fail('an item in "data" lacks an integer "index" or an "embedding"')
        if index in by_index:
            raise fail(f'"data" holds index {index} twice')
        by_index[index] = item["embedding"]
    if sorted(by_index) != list(range(len(by_index))):
        raise fail(f'"data" indexes are not 0..{len(by_index) - 1}')
    return [by_index[i] for i in range(len(by_index))]
