"""BM25 on PostgreSQL, computed in SQL from the server's own statistics, over impact-ordered postings.

`ts_rank_cd` is not BM25 (no inverse document frequency, another length normalisation), so
ranking with it changes which memories come first. Here each generation keeps a postings table
(one row per term of a row's own words, field 0, and of its note neighbours' words, field 1,
weighted CONTEXT_BOOST as in the local engine: term, field, kind, key, tf, field length, and an
impact) and a terms table (each term's document frequency in both fields), both kept in step by
every apply, with N and the token totals on the generation row. The score is Tantivy's:
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75, summed over the query's terms in
both fields.

Early termination, as search engines do it: each (term, field) list is read best impact first
(its index is ordered by the tf part of BM25 at a reference length), at most `per_text` rows of
a row's own words and `per_list` of its neighbours'; the union of what was read is ranked by
those partial scores, and the best `pool` of it are scored exactly (a list that was cut short is
probed by key for each of them it did not hold among the postings read). A list no longer than
its limit is read whole, so on a vault whose query terms are rarer than that (every test
corpus, LoCoMo's vaults) the ranking is exactly Tantivy's; on long lists a row whose every
posting sits in its lists' tails can be passed over (bench/bench_postgres.py prints the overlap
with the exhaustive ranking).

Analysis matches the local engine's (`indexer/search/bm25.py`; tests/test_postgres_backend.py
compares the constants): words are runs of letters and digits, tokens of 40 bytes or more are
dropped, English is Snowball-stemmed without stop words in documents; queries drop stop words
when other words remain. CJK runs, which have no spaces to split on, are also indexed as
overlapping character bigrams (field 2, weighted 1, as the local `cjk` field): a query's CJK
runs are searched by their bigrams alone, so a word inside a sentence is found.
"""

from memvault.indexer.backend.analysis import (
    CJK_RUN_RE,
    CONTEXT_BOOST,
    MAX_QUERY_WORDS,
    STOPWORDS,
    WORD_RE,
    cjk_bigrams,
)
from memvault.indexer.backend.postgres.schema import TEXT_SEARCH_CONFIG

K1, B = 1.2, 0.75
MAX_TOKEN_BYTES = 40


def words(text: str) -> list[str]:
    """The tokens BM25 counts, lower-cased, before stemming (the server stems them)."""
    # a character is at most 4 bytes in UTF-8: a word shorter than a quarter of the limit is kept unencoded
    return [
        w.lower()
        for w in WORD_RE.findall(text)
        if len(w) * 4 < MAX_TOKEN_BYTES or len(w.encode("utf-8")) < MAX_TOKEN_BYTES
    ]


def query_words(text: str) -> list[str]:
    """The words a query searches its rows' own and neighbours' words for: a run of CJK alone
    is searched by its bigrams instead (`query_bigrams`), as the local engine does."""
    found = [w for w in words(text) if not CJK_RUN_RE.fullmatch(w)]
    content = [w for w in found if w not in STOPWORDS] or found
    return content[:MAX_QUERY_WORDS]


def query_bigrams(text: str) -> list[str]:
    return cjk_bigrams(text)[:MAX_QUERY_WORDS]


#: the constants as float8 literals: a bare 0.75 is numeric in SQL, and numeric arithmetic over
#: thousands of postings costs more than reading them
_K1, _B, _BOOST = (f"{value!r}::float8" for value in (K1, B, CONTEXT_BOOST))
#: field lengths a posting's impact is computed at (it only orders a list; scores use the
#: generation's own averages), by the postings' field: 0 a row's own words (about a bullet's),
#: 1 its neighbours' words, 2 its CJK bigrams
REFERENCE_LENGTH = {0: 12.0, 1: 40.0, 2: 12.0}
#: how many postings of each list are read, and how many candidates are scored exactly, per
#: result asked for (and at least): the trade-off bench/bench_postgres.py measures
PER_LIST, PER_LIST_MIN = 3, 200
#: a row's own words carry most of its score: their lists are read much further
PER_TEXT_LIST, PER_TEXT_LIST_MIN = 20, 2000
POOL, POOL_MIN = 2, 100

#: a posting's impact: BM25's tf part at the reference length (SQL over tf, len and field)
IMPACT_SQL = (f"(tf::float8 / (tf + {_K1} * (1 - {_B} + {_B} * len / CASE field WHEN 1 THEN "
              f"{REFERENCE_LENGTH[1]!r}::float8 WHEN 2 THEN {REFERENCE_LENGTH[2]!r}::float8 "
              f"ELSE {REFERENCE_LENGTH[0]!r}::float8 END)))::real")  # fmt: skip

#: parameters: words (text), grams (text[]: the query's CJK bigrams), vault, generation, kinds, depth,
#: per_text, per_list, pool; returns (key, score).
#: {postings} and {terms} name the generation's leaves: read directly, the planner scans their
#: indexes alone (through the parent, its vault and generation filters need every heap row).
#: Per query it reads at most per_text postings of each own-words list and per_list of each
#: neighbours' list (`top`), sums them per row (`pool`), and probes the pool's rows only in the
#: lists that were cut and did not hold them (bench/bench_postgres.py, docs/team.md)
BM25_SQL = f"""
WITH q AS MATERIALIZED (  -- cjk: a bigram, searched in field 2 only (words in fields 0 and 1)
    SELECT lexeme, coalesce(array_length(positions, 1), 1) AS qtf, false AS cjk
    FROM unnest(to_tsvector('{TEXT_SEARCH_CONFIG}', %(words)s))
    UNION ALL
    SELECT gram, count(*), true FROM unnest(%(grams)s::text[]) AS gram GROUP BY gram
),
g AS MATERIALIZED (
    SELECT greatest(rows, 1)::float8 AS n,
           greatest(text_tokens::float8 / greatest(rows, 1), 1e-9) AS avg_text,
           greatest(ctx_tokens::float8 / greatest(rows, 1), 1e-9) AS avg_ctx,
           greatest(cjk_tokens::float8 / greatest(rows, 1), 1e-9) AS avg_cjk
    FROM memvault_generations WHERE vault = %(vault)s AND generation = %(generation)s
),
-- one list per (term, field) the generation holds, with its BM25 weight (idf from the
-- statistics of every kind) and its length normalisation; n numbers the lists in (term, field)
-- order, the order each score is summed in. A list is cut when the generation holds at least
-- its limit of postings (of every kind: one of the kinds asked may hold fewer, and probing a
-- list read whole finds the postings read, so the scores are the same)
l0 AS (
    SELECT q.lexeme, f.field, q.qtf * f.boost * ln(1 + (g.n - f.df + 0.5) / (f.df + 0.5)) * ({_K1} + 1) AS w,
           {_K1} * (1 - {_B}) AS c0, {_K1} * {_B} / f.avg AS c1,
           f.df >= CASE WHEN f.field = 1 THEN %(per_list)s ELSE %(per_text)s END AS cut,
           (row_number() OVER (ORDER BY q.lexeme, f.field))::int AS n
    FROM q JOIN {{terms}} t ON t.lexeme = q.lexeme
    CROSS JOIN g
    CROSS JOIN LATERAL (VALUES (0::int2, 1::float8, t.df_text::float8, g.avg_text),
                               (1::int2, {_BOOST}, t.df_ctx::float8, g.avg_ctx),
                               (2::int2, 1::float8, t.df_cjk::float8, g.avg_cjk)) AS f(field, boost, df, avg)
    WHERE f.df > 0 AND (f.field = 2) = q.cjk
),
-- a bit for each of the first 62 lists (a pool row's bits say which of them held it); a list
-- without one (past 31 words of a question) is probed for every pool row instead
l AS MATERIALIZED (
    SELECT l0.*, CASE WHEN n < 63 THEN 1::int8 << n ELSE 0::int8 END AS bit FROM l0
),
-- each list best impact first, at most per_list / per_text postings of each kind asked
top AS MATERIALIZED (
    SELECT l.n, l.cut, l.bit, p.key, l.w * p.tf / (p.tf + l.c0 + l.c1 * p.len) AS s
    FROM l CROSS JOIN unnest(%(kinds)s::text[]) AS k(kind)
    CROSS JOIN LATERAL (
        SELECT p.key, p.tf, p.len FROM {{postings}} p
        WHERE p.lexeme = l.lexeme AND p.field = l.field AND p.kind = k.kind
        ORDER BY p.impact DESC LIMIT CASE WHEN l.field = 1 THEN %(per_list)s ELSE %(per_text)s END) p
),
pool AS MATERIALIZED (
    SELECT key, bit_or(bit) AS seen FROM top GROUP BY key ORDER BY sum(s) DESC, key LIMIT %(pool)s
),
-- a pool row's exact score: the postings read (a row is in a list once), and for each cut list
-- that did not hold it one index probe by key (never a scan of the lists)
exact AS (
    SELECT t.key, t.n, t.s FROM top t JOIN pool USING (key) WHERE NOT t.cut OR t.bit <> 0
    UNION ALL
    SELECT o.key, c.n, c.w * p.tf / (p.tf + c.c0 + c.c1 * p.len)
    FROM l c CROSS JOIN pool o
    CROSS JOIN LATERAL (
        SELECT p.tf, p.len FROM {{postings}} p
        WHERE p.key = o.key AND p.field = c.field AND p.lexeme = c.lexeme LIMIT 1) p
    WHERE c.cut AND (o.seen & c.bit) = 0
)
-- each score summed in one order (its lists'): floating-point addition is not associative, and rows
-- that tie must tie exactly however their postings were written (one edit at a time or rebuilt).
-- Only here: ordering the pool's partial sums too cost a tenth to a quarter of a query (10k rows)
SELECT key, sum(s ORDER BY n) AS score FROM exact GROUP BY key ORDER BY score DESC, key LIMIT %(depth)s
"""


def read_sizes(depth: int) -> dict:
    """per_list and pool for a list of `depth` candidates."""
    return {
        "per_list": max(PER_LIST_MIN, PER_LIST * depth),
        "per_text": max(PER_TEXT_LIST_MIN, PER_TEXT_LIST * depth),
        "pool": max(POOL_MIN, POOL * depth),
    }
