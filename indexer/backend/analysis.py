"""The text analysis both index engines share, so the same memory is found by the same words on
either: word runs, CJK runs and their overlapping bigrams, the query stop words, and the weight
of a memory's note neighbours. Tantivy (indexer/search/bm25.py) and PostgreSQL
(indexer/backend/postgres/lexical.py) each build on these; a change here changes both alike."""

import re

#: weight of a memory's note neighbours relative to its own words
CONTEXT_BOOST = 0.5
WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)  # Tantivy's simple tokenizer: runs of letters and digits
CJK_RUN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")

#: a query searches at most this many words (and this many CJK bigrams): a pasted page stays one
#: bounded search
MAX_QUERY_WORDS = 64

#: words dropped from queries (not from the index) when other words remain: they match nearly
#: every memory, add nothing to the ranking and make each search scan the whole posting list
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how i in is it its me my of on or "
    "our so that the their them they this to was we were what when where which who whom why will "
    "with you your".split()
)


def cjk_bigrams(text: str) -> list[str]:
    """Overlapping bigrams of every CJK run (a lone character stands for itself)."""
    if text.isascii():  # most memories: no scan
        return []
    grams: list[str] = []
    for run in CJK_RUN_RE.findall(text):
        if len(run) == 1:
            grams.append(run)
        grams.extend(run[i : i + 2] for i in range(len(run) - 1))
    return grams
