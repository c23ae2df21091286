"""Question coverage: how much of the question a memory, read with its neighbours, speaks to.

BM25 matches words exactly; pooled vectors compare whole passages, so one strong topic can drown
the detail a question asks about. Coverage sits between them: each word of the question is
matched to its closest word in the memory by the builtin model's static word vectors ("puppy"
finds "dog"), and the memory's score is the mean of those best matches over the question. A word
found only in the note neighbours counts for NEIGHBOUR_DISCOUNT of its match: conversation
memories lean on the turns around them.

It re-scores the best candidates of the other two retrievers (`memvault.indexer.search.recall.retrieve`) and
enters the fusion as a third ranked list. It reads a static table: no model call, no I/O, and
the same scores for the same texts.
"""

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np

from memvault.indexer.search.embeddings import builtin_word_table, builtin_word_vectors

#: what a question word matched only in the note neighbours is worth against one in the memory
NEIGHBOUR_DISCOUNT = 0.8
#: words read from the question, from a memory and from its neighbours (bounds the work)
MAX_QUESTION_WORDS = 32
MAX_MEMORY_WORDS = 200
MAX_CONTEXT_WORDS = 400
#: words learnt beyond the model's vocabulary (~1 KB each) and texts remembered between calls;
#: both memos start over when either is full
MEMO_LIMIT = 50_000
FIRST_LEARNT_ROWS = 1024  # rows the learnt table starts with; it doubles from there
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
    return sorted(
        ((key, float(score)) for (key, _, _), score in zip(candidates, scores, strict=True)),
        key=lambda pair: (-pair[1], pair[0]),
    )


def word_matches(
    question: str, texts: Sequence[str], contexts: Sequence[str], *, cut: bool = True
) -> tuple[list[str], np.ndarray]:
    """The question's distinct words (numbers aside), and for each its best match in each text
    (words × texts; a word found only in the text's context counts NEIGHBOUR_DISCOUNT of it).
    The relevance floor reads these to credit "puppy" found as "dog"."""
    words = list(dict.fromkeys(_words(question)))[:MAX_QUESTION_WORDS]
    if not words or not texts:
        return words, np.zeros((len(words), len(texts)), dtype=np.float32)
    asked, table, owns, arounds, *cuts = _WORDS.lookup(" ".join(words), list(texts), list(contexts), cut=cut)
    similarity = asked @ table.T
    if cuts:
        similarity[cuts[0]] = -1.0
    best = np.maximum(_best_per_text(similarity, owns, 1.0), _best_per_text(similarity, arounds, NEIGHBOUR_DISCOUNT))
    return words, best


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
        self._rows: dict[str, int] | None = None  # loaded on first use

    def _reset(self) -> None:
        """Start from the model's own vocabulary: words that are one token need no learning."""
        whole_words, model = builtin_word_table()
        self._model = model  # vocabulary rows' unit vectors are normalised when gathered
        self._rows: dict[str, int] = dict(whole_words)
        vocabulary, width = model.matrix.shape
        self._vocabulary = self._size = vocabulary  # rows of the model's vocabulary; rows in use
        self._learnt = np.zeros((0, width), dtype=np.float32)  # rows from `vocabulary` on; grows by doubling
        # per row: the word's digest, computed when the row is first involved (most never are)
        self._digests = np.zeros(vocabulary, dtype=np.uint64)
        self._digested = np.zeros(vocabulary, dtype=bool)
        self._word_of_row = {row: word for word, row in whole_words.items()}
        # per row: its first piece's number and whether it is one letter (`_cut_pairs`), once asked
        self._piece_numbers: dict[str, int] = {}
        self._pieces = np.full(vocabulary, -1, dtype=np.int64)
        self._one_letter = np.zeros(vocabulary, dtype=bool)
        self._texts: dict[tuple[bytes, int], np.ndarray] = {}  # keyed by digest: texts can be long

    def lookup(self, question: str, texts: list[str], contexts: list[str], *, cut: bool = False):
        """(question word vectors, distinct candidate word vectors, and per text and per context
        the columns of its words in the latter); with `cut`, also a mask (question words ×
        candidate words) of the pairs that are one word cut differently (`_cut_pairs`).

        The distinct words are ordered by their own digest, not by when the memo met them, so the
        same texts give bit-identical matrices (and scores) whatever was asked before.
        """
        with self._lock:
            if self._rows is None or self._size - self._vocabulary > MEMO_LIMIT or len(self._texts) > MEMO_LIMIT:
                self._reset()
            asked = " ".join(dict.fromkeys(_words(question)))
            rows = self._rows_of(
                [
                    (asked, MAX_QUESTION_WORDS),
                    *((text, MAX_MEMORY_WORDS) for text in texts),
                    *((context, MAX_CONTEXT_WORDS) for context in contexts),
                ]
            )
            asked_rows, owns, arounds = rows[0], rows[1 : 1 + len(texts)], rows[1 + len(texts) :]
            involved = np.unique(np.concatenate([*owns, *arounds, np.zeros(0, dtype=np.int32)]))
            undigested = involved[~self._digested[involved]]
            if len(undigested):
                self._digests[undigested] = [_digest(self._word_of_row[row]) for row in undigested.tolist()]
                self._digested[undigested] = True
            involved = involved[np.argsort(self._digests[involved], kind="stable")]
            column = np.zeros(self._size, dtype=np.int32)
            column[involved] = np.arange(len(involved), dtype=np.int32)
            found = (
                self._gather(asked_rows),
                self._gather(involved),
                [column[r] for r in owns],
                [column[r] for r in arounds],
            )
            return (*found, self._cut_pairs(asked_rows, involved)) if cut else found

    def _cut_pairs(self, asked: np.ndarray, involved: np.ndarray) -> np.ndarray:
        """Pairs (question word, candidate word) where the candidate is no near word of the
        question's: another word spelt from the same first piece, whatever its case
        ("authentically" for "auth", "Rotterdam" for "rot", "mann" for "man": the two vectors are
        close only through the piece they share), or a word of one letter (the "m" of "I'm")."""
        rows = np.concatenate([asked, involved])
        unread = np.unique(rows[self._pieces[rows] < 0])
        for row in unread.tolist():  # once per row: most rows of a recall were read before
            word = self._word_of_row[row]
            self._pieces[row] = self._piece_numbers.setdefault(self._first_piece(row, word), len(self._piece_numbers))
            self._one_letter[row] = len(word) < 2
        first = self._pieces[rows]
        asked_first, involved_first = first[: len(asked)], first[len(asked) :]
        shared = (asked_first[:, None] == involved_first[None, :]) & (asked[:, None] != involved[None, :])
        return shared | self._one_letter[involved][None, :]

    def _first_piece(self, row: int, word: str) -> str:
        """The token that begins a row's word, lower-cased: a vocabulary row is one token."""
        if row >= self._vocabulary:
            tokens = [t for t in self._model.tokenizer.encode(word, add_special_tokens=False).tokens if t != "\u2581"]
            word = tokens[0].lstrip("\u2581") if tokens else word
        return word.lower()

    def _rows_of(self, texts: list[tuple[str, int]]) -> list[np.ndarray]:
        """Each (text, word limit)'s words as table rows; new words are learnt in one batch."""
        keys = [
            (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), limit)
            for text, limit in texts
        ]
        fresh = {
            key: _words(text)[:limit] for key, (text, limit) in zip(keys, texts, strict=True) if key not in self._texts
        }
        self._learn([w for w in dict.fromkeys(w for words in fresh.values() for w in words) if w not in self._rows])
        for key, words in fresh.items():
            self._texts[key] = np.fromiter((self._rows[w] for w in words), dtype=np.int32, count=len(words))
        return [self._texts[key] for key in keys]

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """The unit vectors of these table rows, in order."""
        out = np.empty((len(rows), self._learnt.shape[1]), dtype=np.float32)
        known = rows < self._vocabulary
        out[known] = self._model.unit_rows(rows[known])
        out[~known] = self._learnt[rows[~known] - self._vocabulary]
        return out

    def _learn(self, words: list[str]) -> None:
        if not words:
            return
        vectors = builtin_word_vectors(words)
        start, end = self._size, self._size + len(words)
        if end > len(self._digests):
            # the learnt rows double, not the whole table: doubling the model's vocabulary on the
            # first new word held tens of MB for a handful of words (issue 43)
            learnt_rows = max(end - self._vocabulary, 2 * len(self._learnt), FIRST_LEARNT_ROWS)
            capacity = self._vocabulary + learnt_rows
            learnt = np.zeros((capacity - self._vocabulary, vectors.shape[1]), dtype=np.float32)
            digests, digested = np.zeros(capacity, dtype=np.uint64), np.zeros(capacity, dtype=bool)
            learnt[: start - self._vocabulary] = self._learnt[: start - self._vocabulary]
            digests[:start], digested[:start] = self._digests[:start], self._digested[:start]
            self._learnt, self._digests, self._digested = learnt, digests, digested
            pieces, one_letter = np.full(capacity, -1, dtype=np.int64), np.zeros(capacity, dtype=bool)
            pieces[:start], one_letter[:start] = self._pieces[:start], self._one_letter[:start]
            self._pieces, self._one_letter = pieces, one_letter
        self._learnt[start - self._vocabulary : end - self._vocabulary] = vectors
        self._digests[start:end] = [_digest(word) for word in words]
        self._digested[start:end] = True
        self._rows.update((word, start + n) for n, word in enumerate(words))
        self._word_of_row.update((start + n, word) for n, word in enumerate(words))
        self._size = end


def _words(text: str) -> list[str]:
    """The text's words; numbers are left to BM25 (a sum of digit vectors means nothing)."""
    return [word for word in _WORD_RE.findall(text) if not word.isdigit()]


def _digest(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


_WORDS = _WordMemo()
