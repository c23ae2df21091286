"""What every embedding provider shares: provider names and defaults, the identity stored beside
vectors, the provider protocol, and the row helpers (unit rows, encodable text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

BUILTIN = "builtin"
E5_SMALL = "e5-small"
OLLAMA = "ollama"
LMSTUDIO = "lmstudio"
OPENAI = "openai"
PROVIDERS = (BUILTIN, E5_SMALL, OLLAMA, LMSTUDIO, OPENAI)

BUILTIN_MODEL = "wordllama-l2-supercat"
BUILTIN_DIM = 256
E5_MODEL = "multilingual-e5-small-q4"
E5_DIM = 384

DEFAULT_MODELS = {
    BUILTIN: BUILTIN_MODEL,
    E5_SMALL: E5_MODEL,
    OLLAMA: "nomic-embed-text:v1.5",
    LMSTUDIO: "text-embedding-nomic-embed-text-v1.5",
}
DEFAULT_ENDPOINTS = {
    OLLAMA: "http://localhost:11434",
    LMSTUDIO: "http://localhost:1234/v1",
    OPENAI: "https://api.openai.com/v1",
}


@dataclass(frozen=True)
class EmbeddingIdentity:
    """What produced a set of vectors. Stored beside them; a mismatch means "rebuild needed"."""

    provider: str
    model: str
    dim: int

    def describe(self) -> str:
        return f"{self.provider}/{self.model}/{self.dim}"


@runtime_checkable
class EmbeddingProvider(Protocol):
    identity: EmbeddingIdentity

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Documents → float32 array of shape (len(texts), dim), rows of unit length."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """One search query → float32 vector of shape (dim,); may be prefixed unlike documents."""
        ...


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Return a float32 copy whose non-zero rows have unit L2 norm; zero rows stay zero."""
    rows = np.array(matrix, dtype=np.float32, copy=True)
    if rows.size == 0:
        return rows
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def clean_text(text: str) -> str:
    """The text, with lone surrogates (from undecodable file bytes) made encodable as UTF-8."""
    if not isinstance(text, str):
        raise TypeError(f"embedding input must be str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text
