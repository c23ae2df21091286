"""A second stage over the fused list: a cross-encoder reranker behind an HTTP endpoint.

    reranker = HttpReranker("http://localhost:8080/v1/rerank", "bge-reranker-v2-m3")
    scores = reranker.scores("which color did we pick?", ["Morgan chose blue …", "Standup moved …"])

Bi-encoders compare two vectors made apart; a cross-encoder reads the question and the memory
together, which is where the remaining headroom of memvault's recall lies (docs/recall.md). None
ships inside a wheel, but people who run a model server have one, and the servers agree on two
wire shapes, chosen by `memory.rerank.format`:

* `cohere` (the default; Jina's and Cohere's API, llama.cpp's server `/v1/rerank`, Infinity,
  vLLM): POST `{"model", "query", "documents", "top_n"}` → `{"results": [{"index",
  "relevance_score"}, …]}`.
* `tei` (Hugging Face text-embeddings-inference `/rerank`): POST `{"query", "texts"}` →
  `[{"index", "score"}, …]`.

Either answer shape is read whichever was asked for (some servers answer TEI's to Cohere's
request). An answer is refused whole — the caller then recalls without the reranker and says
`degraded` — when it is not JSON, names an index twice or outside the documents, holds a score
that is not a finite number, or lists more results than documents were sent. A server that
returns fewer (a `top_n` it cut) scores those; the rest keep their fused rank.

Its ranking joins the fusion as one more ranked list (`fuse_rerank`), weighted like BM25, rather
than replacing the order: a weak reranker cannot wreck the head of the list that BM25, vectors
and coverage agree on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memvault.indexer.search.http_json import HttpTarget, post_json
from memvault.indexer.search.hybrid import RRF_K, Fused
from memvault.vault.errors import ProviderUnavailable

FORMATS = ("cohere", "tei")
#: fused candidates sent to the reranker (the issue's 30–50 band; config `memory.rerank.candidates`)
DEFAULT_CANDIDATES = 40
DEFAULT_TIMEOUT_MS = 2000
#: characters of one memory sent (a cross-encoder reads ~512 tokens anyway)
MAX_DOCUMENT_CHARS = 2000
#: weight of the reranker's list against BM25's 1.0
RERANK_WEIGHT = 1.0
#: an answer to at most 100 short documents is small; anything far larger is not a rerank answer
_MAX_ANSWER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RerankAnswer:
    """Scores for the documents the server ranked (document index → score)."""

    scores: dict[int, float]


class HttpReranker:
    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        format: str = "cohere",
        timeout_s: float = DEFAULT_TIMEOUT_MS / 1000,
        candidates: int = DEFAULT_CANDIDATES,
        api_key: str | None = None,
        unavailable: str | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ValueError(f"rerank format {format!r} is not one of {', '.join(FORMATS)}")
        self.endpoint, self.model, self.format = endpoint, model, format
        self.timeout_s, self.candidates = timeout_s, candidates
        self._api_key = api_key
        self._unavailable = unavailable  # a configuration that cannot work (a named key not set): say so per call
        self._target = HttpTarget(
            f"reranker (model {model})",
            "memory.rerank.endpoint",
            "start the rerank server",
            "check memory.rerank.endpoint: the full URL of the rerank route (llama.cpp and Infinity: "
            '…/v1/rerank or …/rerank; TEI: …/rerank with format "tei")',
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"HttpReranker({self.model} at {self.endpoint}, {self.format})"

    def scores(self, query: str, documents: Sequence[str]) -> RerankAnswer:
        """The server's score for each document it ranked; ProviderUnavailable on any failure."""
        if self._unavailable:
            raise ProviderUnavailable(self._unavailable)
        if not documents:
            return RerankAnswer({})
        texts = [text[:MAX_DOCUMENT_CHARS] for text in documents]
        if self.format == "tei":
            payload: dict[str, Any] = {"query": query, "texts": texts}
        else:
            payload = {"model": self.model, "query": query, "documents": texts, "top_n": len(texts)}
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        answer = post_json(
            self.endpoint,
            payload,
            target=self._target,
            timeout_s=self.timeout_s,
            headers=headers,
            max_bytes=_MAX_ANSWER_BYTES,
        )
        return RerankAnswer(self._parse(answer, len(texts)))

    def _parse(self, answer: Any, count: int) -> dict[int, float]:
        results = answer.get("results") if isinstance(answer, dict) else answer
        if not isinstance(results, list):
            raise self._fail('the answer is neither {"results": [...]} nor a list of results')
        if len(results) > count:
            raise self._fail(f"it returned {len(results)} results for {count} documents")
        scores: dict[int, float] = {}
        for result in results:
            if not isinstance(result, dict):
                raise self._fail("a result is not an object with index and relevance_score")
            index = result.get("index")
            score = result.get("relevance_score", result.get("score"))
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise self._fail(f"a result names document {index!r}, not one of 0..{count - 1}")
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise self._fail(f"document {index} has score {score!r}, not a finite number")
            if index in scores:
                raise self._fail(f"document {index} is ranked twice")
            scores[index] = float(score)
        return scores

    def _fail(self, problem: str) -> ProviderUnavailable:
        fix = (
            'check memory.rerank.format: "cohere" for Jina/Cohere-style servers (llama.cpp, Infinity, vLLM), '
            '"tei" for text-embeddings-inference'
        )
        return ProviderUnavailable(f"{self._target.name} at {self.endpoint}: {problem}: {fix}")


def reranker_from_config(rerank, env) -> HttpReranker | None:
    """The reranker `memory.rerank` names (None without the block). `env` is passed in: the API
    key is read from the variable `apiKeyEnv` names; a named but unset one fails each call."""
    if rerank is None:
        return None
    api_key, unavailable = None, None
    if rerank.api_key_env:
        api_key = env.get(rerank.api_key_env)
        if not api_key:
            unavailable = f"memory.rerank.apiKeyEnv names {rerank.api_key_env}, which is not set: export it"
    return HttpReranker(
        rerank.endpoint,
        rerank.model,
        format=rerank.format,
        timeout_s=rerank.timeout_ms / 1000,
        candidates=rerank.candidates,
        api_key=api_key,
        unavailable=unavailable,
    )


def fuse_rerank(fused: list[Fused], keys: Sequence[str], answer: RerankAnswer) -> list[Fused]:
    """The candidates re-ordered with the reranker's list joined as one more RRF term.

    `keys[i]` is the candidate the i-th document came from. Documents the server did not score
    get nothing; ties in its scores keep the fused order.
    """
    position = {key: n for n, key in enumerate(keys)}
    ranked = sorted(answer.scores.items(), key=lambda pair: (-pair[1], pair[0]))
    bonus = {keys[index]: (rank, score) for rank, (index, score) in enumerate(ranked, 1)}
    for entry in fused:
        if entry.key in bonus and entry.key in position:
            rank, score = bonus[entry.key]
            entry.score += RERANK_WEIGHT / (RRF_K + rank) * 2.0
            entry.evidence["rerank"] = (rank, score)
    return sorted(fused, key=lambda entry: (-entry.score, entry.key))
