"""BM25 on PostgreSQL, computed in SQL from the server's own statistics.

`ts_rank_cd` is not BM25 (no inverse document frequency, another length normalisation), so
ranking with it changes which memories come first. Here each row keeps two tsvectors (its own
words, and its note neighbours' words, weighted CONTEXT_BOOST as in the local engine) and their
token counts; a generation row keeps N and the token totals, kept in step by every apply; the
document frequency of each query term is counted through the GIN index at query time. The
score is Tantivy's: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75, summed over
the query's terms in both fields.

Analysis matches the local engine's (`indexer/search/bm25.py`; tests/test_postgres_backend.py
compares the constants): words are runs of letters and digits, tokens of 40 bytes or more are
dropped, English is Snowball-stemmed without stop words in documents; queries drop stop words
when other words remain.
"""

import re

from memvault.indexer.backend.postgres.schema import TEXT_SEARCH_CONFIG

K1, B = 1.2, 0.75
CONTEXT_BOOST = 0.5
WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
MAX_TOKEN_BYTES = 40
MAX_QUERY_WORDS = 64
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how i in is it its me my of on or "
    "our so that the their them they this to was we were what when where which who whom why will "
    "with you your".split()
)


def words(text: str) -> list[str]:
    """The tokens BM25 counts, lower-cased, before stemming (the server stems them)."""
    return [w.lower() for w in WORD_RE.findall(text) if len(w.encode("utf-8")) < MAX_TOKEN_BYTES]


def query_words(text: str) -> list[str]:
    found = words(text)
    content = [w for w in found if w not in STOPWORDS] or found
    return content[:MAX_QUERY_WORDS]


#: one row's BM25 score summed over the query's terms (tt, ct: the term's frequency in the row's
#: own words and in its neighbours'; NULL when absent)
#: the constants as float8 literals: a bare 0.75 is numeric in SQL, and numeric arithmetic over
#: thousands of candidates costs more than the lookups
_K1, _B, _BOOST = (f"{value!r}::float8" for value in (K1, B, CONTEXT_BOOST))

_SCORE = (f"sum(coalesce(i.qtf * i.idf_text * f.tt * ({_K1} + 1) / (f.tt + {_K1} * (1 - {_B} + {_B} * c.text_len / g.avg_text)), 0)"
          f" + coalesce({_BOOST} * i.qtf * i.idf_ctx * f.ct * ({_K1} + 1)"
          f" / (f.ct + {_K1} * (1 - {_B} + {_B} * c.ctx_len / g.avg_ctx)), 0))")  # fmt: skip

#: parameters: words (text), vault, generation, kinds, depth; returns (key, score) best first.
#: Each row's term frequencies are kept as {lexeme: tf} (text_tf, ctx_tf) so scoring looks up
#: the query's few terms instead of unnesting every candidate's tsvector.
BM25_SQL = f"""
WITH q AS MATERIALIZED (
    SELECT lexeme, coalesce(array_length(positions, 1), 1) AS qtf
    FROM unnest(to_tsvector('{TEXT_SEARCH_CONFIG}', %(words)s))
),
tsq AS MATERIALIZED (
    SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query FROM q
),
g AS MATERIALIZED (
    SELECT greatest(rows, 1)::float8 AS n,
           greatest(text_tokens::float8 / greatest(rows, 1), 1e-9) AS avg_text,
           greatest(ctx_tokens::float8 / greatest(rows, 1), 1e-9) AS avg_ctx
    FROM memvault_generations WHERE vault = %(vault)s AND generation = %(generation)s
),
-- every row (of any kind: BM25's statistics count them all) whose own words hold a query term
text_hits AS MATERIALIZED (
    SELECT r.key, r.kind, r.text_tf, r.ctx_tf, r.text_len, r.ctx_len
    FROM memvault_rows r, tsq
    WHERE r.vault = %(vault)s AND r.generation = %(generation)s AND r.text_tsv @@ tsq.query
),
df AS MATERIALIZED (
    SELECT q.lexeme, q.qtf,
        (SELECT count(*) FROM text_hits h WHERE h.text_tf ? q.lexeme)::float8 AS df_text,
        (SELECT count(*) FROM memvault_rows r WHERE r.vault = %(vault)s AND r.generation = %(generation)s
            AND r.ctx_tsv @@ quote_literal(q.lexeme)::tsquery)::float8 AS df_ctx
    FROM q
),
idf AS MATERIALIZED (
    SELECT d.lexeme, d.qtf,
        ln(1 + (g.n - d.df_text + 0.5) / (d.df_text + 0.5)) AS idf_text,
        ln(1 + (g.n - d.df_ctx + 0.5) / (d.df_ctx + 0.5)) AS idf_ctx
    FROM df d CROSS JOIN g
),
text_scored AS MATERIALIZED (
    SELECT c.key, {_SCORE} AS score
    FROM text_hits c CROSS JOIN g CROSS JOIN idf i
    CROSS JOIN LATERAL (SELECT (c.text_tf ->> i.lexeme)::float8 AS tt, (c.ctx_tf ->> i.lexeme)::float8 AS ct) f
    WHERE c.kind = ANY(%(kinds)s)
    GROUP BY c.key
),
-- a row that matches only through its neighbours scores at most this (every term, tf without bound)
ctx_ceiling AS (
    SELECT coalesce(sum({_BOOST} * qtf * idf_ctx * ({_K1} + 1)), 0) AS most FROM idf
),
threshold AS (
    SELECT score FROM text_scored ORDER BY score DESC OFFSET %(depth)s - 1 LIMIT 1
),
-- scored only when such a row could still reach the top `depth` (exact, like Tantivy's pruning)
ctx_scored AS (
    SELECT c.key, {_SCORE} AS score
    FROM memvault_rows c CROSS JOIN tsq CROSS JOIN g CROSS JOIN idf i
    CROSS JOIN LATERAL (SELECT NULL::float8 AS tt, (c.ctx_tf ->> i.lexeme)::float8 AS ct) f
    WHERE (SELECT most FROM ctx_ceiling) >= coalesce((SELECT score FROM threshold), 0)
      AND c.vault = %(vault)s AND c.generation = %(generation)s AND c.kind = ANY(%(kinds)s)
      AND c.ctx_tsv @@ tsq.query AND NOT c.text_tsv @@ tsq.query
    GROUP BY c.key
)
SELECT key, score FROM (SELECT * FROM text_scored UNION ALL SELECT * FROM ctx_scored) scored
ORDER BY score DESC, key
LIMIT %(depth)s
"""
