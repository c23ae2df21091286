"""BM25 on PostgreSQL, computed in SQL from the server's own statistics, over impact-ordered postings blocks.

`ts_rank_cd` is not BM25 (no inverse document frequency, another length normalisation), so
ranking with it changes which memories come first. Here each generation keeps, beside its rows:

* a terms table: each term (a stemmed word, or a CJK bigram) once, with an integer id and its
  document frequency in each field (0 a row's own words, 1 its note neighbours' words, weighted
  CONTEXT_BOOST as in the local engine, 2 its CJK bigrams);
* a forward index on each row (`memvault_rows.doc`, an integer per generation; `lex`, the row's
  terms with their field, and `lex_tf`, each one's tf and field length), from which a cut list's
  exact score is computed and a deleted row's postings are found;
* a postings table of blocks: one row per (term, field, kind) and block holding up to
  2 x BLOCK postings packed as int8 (doc, tf, field length), sealed blocks (tier 1) cover disjoint
  impact ranges (top, low), so reading them best `top` first reads a list best impact first.
  An apply appends its postings as delta rows (tier 0, one per list it touches), which a query
  always reads whole; once a serving generation holds MERGE_AT delta postings, the apply merges
  them into the sealed blocks: each posting into the block whose range holds its impact, a block
  past 2 x BLOCK split in pieces of BLOCK. A merge rewrites only the blocks it adds to, each at
  most 2 x BLOCK postings (postings.py). A rebuild's load stays in the delta and is sealed once,
  before its generation serves.

N and the token totals are on the generation row. The score is Tantivy's:
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75, summed over the query's terms in
both fields.

Early termination, as search engines do it: each (term, field) list is read best impact first,
whole blocks until at least `per_text` postings of a row's own words or `per_list` of its
neighbours' are read (and its delta whole); the union of what was read is ranked by those partial
scores, and the best `pool` of it are scored exactly (a list that was cut short from each row's
forward index, one lookup per row). A list no longer
than its limit is read whole, so on a vault whose query terms are rarer than that (every test
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
#: a sealed block holds BLOCK to 2 x BLOCK postings (8 bytes each: a block's row stays under
#: PostgreSQL's 2 KB TOAST threshold, so it is read without decompressing)
BLOCK = 100
#: a serving generation's delta postings merged into its blocks once they are this many
MERGE_AT = 4096
#: a row's kind as the postings store it (a smallint: the blocks of each kind are their own lists)
KIND_CODES = {"curated": 0, "audit": 1}
KIND_SQL = "CASE {} WHEN 'curated' THEN 0 WHEN 'audit' THEN 1 END::int2"

#: a posting, packed: doc << 32 | tf << 16 | field length (tf and length capped at 32767); a
#: row's forward index: `lex` its terms as term << 2 | field (term ids below 2^29), sorted, and
#: `lex_tf` each one's tf << 16 | field length (array_position finds a list's entry in C)
TF_SQL = "((({}) >> 16) & 65535)"
LEN_SQL = "(({}) & 65535)"


def score_sql(entry: str) -> str:
    """A packed entry's BM25 score in list `l` (its weight and length normalisation)."""
    tf, length = TF_SQL.format(entry) + "::float8", LEN_SQL.format(entry) + "::float8"
    return f"l.w * {tf} / ({tf} + l.c0 + l.c1 * {length})"


def impact_sql(entry: str, field: str) -> str:
    """A packed posting's impact, BM25's tf part at the reference length (it orders a list)."""
    tf, length = TF_SQL.format(entry) + "::float8", LEN_SQL.format(entry) + "::float8"
    return (f"({tf} / ({tf} + {_K1} * (1 - {_B} + {_B} * {length} / CASE {field} WHEN 1 THEN "
            f"{REFERENCE_LENGTH[1]!r}::float8 WHEN 2 THEN {REFERENCE_LENGTH[2]!r}::float8 "
            f"ELSE {REFERENCE_LENGTH[0]!r}::float8 END)))::real")  # fmt: skip


#: parameters: words (text), grams (text[]: the query's CJK bigrams), vault, generation, kinds
#: (int2[], KIND_CODES), depth, per_text, per_list, pool; returns (key, score).
#: {postings}, {terms} and {rows} name the generation's leaves: read directly, the planner scans
#: their indexes alone (through the parent, its vault and generation filters need every heap row).
#: Per query it reads each list's delta and its sealed blocks best first until per_text (own
#: words) or per_list (neighbours') postings are read (`top`), sums them per row (`pool`), and
#: scores the pool's rows exactly: from the postings read, and from their forward index for the lists
#: that were cut (bench/bench_postgres.py, docs/team.md)
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
-- statistics of every kind), its length normalisation and how many of its postings are read;
-- n numbers the lists in (term, field) order, the order each score is summed in
l AS MATERIALIZED (
    SELECT t.id AS term, f.field, q.qtf * f.boost * ln(1 + (g.n - f.df + 0.5) / (f.df + 0.5)) * ({_K1} + 1) AS w,
           {_K1} * (1 - {_B}) AS c0, {_K1} * {_B} / f.avg AS c1,
           CASE WHEN f.field = 1 THEN %(per_list)s ELSE %(per_text)s END AS reads,
           f.df >= CASE WHEN f.field = 1 THEN %(per_list)s ELSE %(per_text)s END AS cut,
           (row_number() OVER (ORDER BY q.lexeme, f.field))::int AS n
    FROM q JOIN {{terms}} t ON t.lexeme = q.lexeme
    CROSS JOIN g
    CROSS JOIN LATERAL (VALUES (0::int2, 1::float8, t.df_text::float8, g.avg_text),
                               (1::int2, {_BOOST}, t.df_ctx::float8, g.avg_ctx),
                               (2::int2, 1::float8, t.df_cjk::float8, g.avg_cjk)) AS f(field, boost, df, avg)
    WHERE f.df > 0 AND (f.field = 2) = q.cjk
),
-- each list's delta, and its sealed blocks best first while fewer than `reads` postings came before
top AS MATERIALIZED (
    SELECT l.n, k.kind, b.tier, (x.e >> 32)::int4 AS doc, {score_sql("x.e")} AS s
    FROM l CROSS JOIN unnest(%(kinds)s::int2[]) AS k(kind)
    CROSS JOIN LATERAL (
        SELECT 1 AS tier, b.entries FROM (
            SELECT p.entries, sum(p.n) OVER (ORDER BY p.top DESC ROWS UNBOUNDED PRECEDING) - p.n AS before
            FROM {{postings}} p WHERE p.tier = 1 AND p.term = l.term AND p.field = l.field AND p.kind = k.kind
            ORDER BY p.top DESC) b
        WHERE b.before < l.reads
        UNION ALL
        SELECT 0, p.entries FROM {{postings}} p
        WHERE p.tier = 0 AND p.term = l.term AND p.field = l.field AND p.kind = k.kind) b
    CROSS JOIN LATERAL unnest(b.entries) AS x(e)
),
pool AS MATERIALIZED (  -- with each row's key and forward index, read once
    SELECT p.doc, r.key, r.lex, r.lex_tf
    FROM (SELECT doc FROM top GROUP BY doc ORDER BY sum(s) DESC, doc LIMIT %(pool)s) p
    JOIN {{rows}} r ON r.doc = p.doc
),
-- the lists of which some sealed postings were not read (only a list with as many postings as
-- its reads can be: its blocks' counts, from the index alone)
got AS (
    SELECT n, kind, count(*) AS got FROM top WHERE tier = 1 GROUP BY n, kind
),
cut AS MATERIALIZED (
    SELECT DISTINCT l.n FROM l CROSS JOIN unnest(%(kinds)s::int2[]) AS k(kind)
    CROSS JOIN LATERAL (SELECT coalesce(sum(p.n), 0) AS held FROM {{postings}} p
                        WHERE p.tier = 1 AND p.term = l.term AND p.field = l.field AND p.kind = k.kind) c
    LEFT JOIN got ON got.n = l.n AND got.kind = k.kind
    WHERE l.cut AND c.held > coalesce(got.got, 0)
),
-- a pool row's exact score: the postings read of the lists read whole, and its forward index's
-- entries of the lists that were cut
exact AS (
    SELECT t.doc, t.n, t.s FROM top t JOIN pool USING (doc) WHERE t.n NOT IN (SELECT n FROM cut)
    UNION ALL
    SELECT pool.doc, l.n, {score_sql("v.t")}
    FROM pool CROSS JOIN l
    CROSS JOIN LATERAL (SELECT pool.lex_tf[array_position(pool.lex, (l.term << 2) | l.field)] AS t) v
    WHERE l.n IN (SELECT n FROM cut) AND v.t IS NOT NULL AND EXISTS (SELECT FROM cut)
),
-- each score summed in one order (its lists'): floating-point addition is not associative, and rows
-- that tie must tie exactly however their postings were written (one edit at a time or rebuilt)
scored AS (
    SELECT doc, sum(s ORDER BY n) AS score FROM exact GROUP BY doc
)
SELECT pool.key, s.score FROM scored s JOIN pool USING (doc) ORDER BY s.score DESC, pool.key LIMIT %(depth)s
"""


def read_sizes(depth: int) -> dict:
    """per_list and pool for a list of `depth` candidates."""
    return {
        "per_list": max(PER_LIST_MIN, PER_LIST * depth),
        "per_text": max(PER_TEXT_LIST_MIN, PER_TEXT_LIST * depth),
        "pool": max(POOL_MIN, POOL * depth),
    }


def kind_codes(kinds) -> list[int]:
    return [KIND_CODES[kind] for kind in kinds if kind in KIND_CODES]
