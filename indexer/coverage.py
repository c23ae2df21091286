"""Question coverage: how much of the question a memory, read with its neighbours, speaks to.

BM25 matches words exactly; pooled vectors compare whole passages, so one strong topic can drown
the detail a question asks about. Coverage sits between them: each word of the question is
matched to its closest word in the memory by the builtin model's static token embeddings
("puppy" finds "dog", "moved" finds "relocated"), and the memory's score is the mean of those
best matches over the question. A word found only in the note neighbours counts for
NEIGHBOUR_DISCOUNT of its match: conversation memories lean on the turns around them.

It re-scores the best candidates of the other two retrievers (`indexer.recall.retrieve`) and
enters the fusion as a third ranked list. It reads a static table: no model call, no I/O, and
the same scores for the same texts.
"""

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np

from indexer.embeddings import builtin_word_vectors

#: what a question word matched only in the note neighbours is worth against one in the memory
NEIGHBOUR_DISCOUNT = 0.8
#: words read from the question, from a memory and from its neighbours (bounds the work)
MAX_QUESTION_WORDS = 32
MAX_MEMORY_WORDS = 200
MAX_CONTEXT_WORDS = 400
#: distinct words (~1 KB each) and texts remembered between calls; both start over when one is full
MEMO_LIMIT = 50_000
_WORD_RE = re.compile(r"\w{1,40}")  # a longer run of letters is read in pieces


def coverage(question: str, candidates: Sequence[tuple[str, str, str]]) -> list[tuple[str, float]]:
    """(key, coverage in [-1, 1]) for each (key, text, context) candidate, best first, ties by key.

    A question with no words covers nothing: the result is empty. A memory with no words scores -1.
    """
    if not candidates:
        return []
    asked, words, owns, arounds = _WORDS.lookup(
        question, [text for _, text, _ in candidates], [context for _, _, context in candidates]
    )
    if not len(asked):
        return []
    similarity = asked @ words.T  # question words × the candidates' distinct words
    best = np.maximum(_best_per_text(similarity, owns, 1.0), _best_per_text(similarity, arounds, NEIGHBOUR_DISCOUNT))
    scores = best.mean(axis=0)
    return sorted(((key, float(score)) for (key, _, _), score in zip(candidates, scores, strict=True)),
                  key=lambda pair: (-pair[1], pair[0]))


def _best_per_text(similarity: np.ndarray, texts: list[np.ndarray], weight: float) -> np.ndarray:
    """(question words × texts): each question word's best match in each text, times `weight`;
    -1 for a text without words."""
    lengths = np.array([len(columns) for columns in texts])
    best = np.full((similarity.shape[0], len(texts)), -1.0, dtype=np.float32)
    present = lengths > 0
    if present.any():
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        best[:, present] = weight * np.maximum.reduceat(similarity[:, np.concatenate(texts)], starts[present], axis=1)
    return best


class _WordMemo:
    """Every word seen so far with its unit vector, and each text's words as rows of that table.

    Texts recur from query to query (the same memories are candidates again), so after the first
    sight a text costs one dictionary lookup. One lock guards both memos; they are reset together
    so a memoised text never points into a table that was started over.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._rows: dict[str, int] = {}
        self._vectors = np.zeros((0, 0), dtype=np.float32)  # capacity grows by doubling
        self._digests = np.zeros(0, dtype=np.uint64)  # per row: a digest of the word itself
        self._texts: dict[tuple[bytes, int], np.ndarray] = {}  # keyed by digest: texts can be long

    def lookup(self, question: str, texts: list[str], contexts: list[str]):
        """(question word vectors, distinct candidate word vectors, and per text and per context
        the columns of its words in the latter).

        The distinct words are ordered by their own digest, not by when the memo met them, so the
        same texts give bit-identical matrices (and scores) whatever was asked before.
        """
        with self._lock:
            if len(self._rows) > MEMO_LIMIT or len(self._texts) > MEMO_LIMIT:
                self._reset()
            asked = self._of(" ".join(dict.fromkeys(_WORD_RE.findall(question))), MAX_QUESTION_WORDS)
            owns = [self._of(text, MAX_MEMORY_WORDS) for text in texts]
            arounds = [self._of(context, MAX_CONTEXT_WORDS) for context in contexts]
            involved = np.unique(np.concatenate([*owns, *arounds, np.zeros(0, dtype=np.int32)]))
            involved = involved[np.argsort(self._digests[involved], kind="stable")]
            column = np.zeros(len(self._rows), dtype=np.int32)
            column[involved] = np.arange(len(involved), dtype=np.int32)
            return (self._vectors[asked], self._vectors[involved],
                    [column[rows] for rows in owns], [column[rows] for rows in arounds])

    def _of(self, text: str, limit: int) -> np.ndarray:
        key = (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), limit)
        rows = self._texts.get(key)
        if rows is None:
            words = _WORD_RE.findall(text)[:limit]
            self._learn([w for w in dict.fromkeys(words) if w not in self._rows])
            rows = self._texts[key] = np.fromiter((self._rows[w] for w in words), dtype=np.int32, count=len(words))
        return rows

    def _learn(self, words: list[str]) -> None:
        if not words:
            return
        vectors = builtin_word_vectors(words)
        start, end = len(self._rows), len(self._rows) + len(words)
        if end > len(self._vectors):
            capacity = max(end, 2 * len(self._vectors), 1024)
            grown = np.zeros((capacity, vectors.shape[1]), dtype=np.float32)
            digests = np.zeros(capacity, dtype=np.uint64)
            if start:
                grown[:start], digests[:start] = self._vectors[:start], self._digests[:start]
            self._vectors, self._digests = grown, digests
        self._vectors[start:end] = vectors
        self._digests[start:end] = [_digest(word) for word in words]
        self._rows.update((word, start + n) for n, word in enumerate(words))


def _digest(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


_WORDS = _WordMemo()
