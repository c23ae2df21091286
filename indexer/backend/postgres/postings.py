"""The lexical index's writes: a batch of rows in (their forward index, their terms, their
postings as delta rows), rows out (their postings taken from the blocks or the delta that hold
them), and the merge of the delta into the sealed blocks. The layout is lexical.py's.

A write of a few rows touches one delta row per list it adds to and one block per posting it
removes (at most 2 x BLOCK postings each); the merge that follows once MERGE_AT delta postings
wait rewrites only the blocks they fall into, so no apply rewrites a common term's whole list.
"""

from memvault.indexer.backend.postgres import lexical
from memvault.indexer.backend.postgres.lexical import KIND_SQL, TF_SQL, impact_sql
from memvault.indexer.backend.postgres.schema import TEXT_SEARCH_CONFIG

#: rows arrive by COPY into the session's staging table, then one statement analyses each text
#: once and writes the rows (with their doc numbers and forward index), the terms' ids and
#: document frequencies, and one delta row per list. Parameters: vault, generation
INSERT_STAGED = f"""
WITH a AS MATERIALIZED (
    SELECT s.*, to_tsvector('{TEXT_SEARCH_CONFIG}', s.own) AS tt, to_tsvector('{TEXT_SEARCH_CONFIG}', s.around) AS ct,
           {KIND_SQL.format("s.kind")} AS kc,
           ((SELECT coalesce(max(doc), 0) FROM {{rows}}) + row_number() OVER (ORDER BY s.key))::int4 AS doc
    FROM memvault_staging s
),
lex AS MATERIALIZED (
    SELECT a.doc, a.kc, 0::int2 AS field, u.lexeme,
           least(coalesce(array_length(u.positions, 1), 1), 32767)::int8 AS tf, least(a.text_len, 32767)::int8 AS len
    FROM a CROSS JOIN LATERAL unnest(a.tt) AS u
    UNION ALL
    SELECT a.doc, a.kc, 1::int2, u.lexeme, least(coalesce(array_length(u.positions, 1), 1), 32767),
           least(a.ctx_len, 32767)
    FROM a CROSS JOIN LATERAL unnest(a.ct) AS u
    UNION ALL  -- CJK bigrams, as they are (the local `cjk` field's whitespace tokens)
    SELECT a.doc, min(a.kc), 2::int2, u.gram, least(count(*), 32767), least(min(a.cjk_len), 32767)
    FROM a CROSS JOIN LATERAL unnest(a.grams) AS u(gram) GROUP BY a.doc, u.gram
),
-- each term once, with the id the generation gave it or a new one after its highest
fresh AS MATERIALIZED (
    SELECT x.*, coalesce(t.id, (SELECT coalesce(max(id), 0) FROM {{terms}})
                               + (row_number() OVER (PARTITION BY t.id IS NULL ORDER BY x.lexeme))::int4) AS id
    FROM (SELECT lexeme, count(*) FILTER (WHERE field = 0) AS df_text, count(*) FILTER (WHERE field = 1) AS df_ctx,
                 count(*) FILTER (WHERE field = 2) AS df_cjk
          FROM lex GROUP BY lexeme) x
    LEFT JOIN {{terms}} t USING (lexeme)
),
tr AS (
    INSERT INTO {{terms}} AS t (vault, generation, lexeme, id, df_text, df_ctx, df_cjk)
    SELECT %(vault)s, %(generation)s, lexeme, id, df_text, df_ctx, df_cjk FROM fresh
    ON CONFLICT (lexeme) DO UPDATE SET df_text = t.df_text + EXCLUDED.df_text, df_ctx = t.df_ctx + EXCLUDED.df_ctx,
        df_cjk = t.df_cjk + EXCLUDED.df_cjk
),
lx AS MATERIALIZED (
    SELECT lex.doc, lex.kc, lex.field, f.id AS term, (lex.tf << 16) | lex.len AS tail
    FROM lex JOIN fresh f USING (lexeme)
),
fw AS (
    SELECT doc, array_agg((term << 2) | field ORDER BY term, field) AS lex,
           array_agg(tail::int4 ORDER BY term, field) AS lex_tf
    FROM lx GROUP BY doc
),
r AS (
    INSERT INTO memvault_rows (vault, generation, key, id, path, kind, day, at, text, content_hash,
        context_hash, context, text_len, ctx_len, embedding, doc, lex, lex_tf)
    SELECT a.vault, a.generation, a.key, a.id, a.path, a.kind, a.day, a.at, a.text, a.content_hash, a.context_hash,
           a.context, a.text_len, a.ctx_len, a.embedding, a.doc, coalesce(fw.lex, '{{{{}}}}'),
           coalesce(fw.lex_tf, '{{{{}}}}')
    FROM a LEFT JOIN fw USING (doc)
)
INSERT INTO {{postings}} (vault, generation, tier, term, field, kind, top, low, n, entries)
SELECT %(vault)s, %(generation)s, 0, term, field, kc, max(imp), min(imp), count(*), array_agg(e ORDER BY e)
FROM (SELECT term, field, kc, e, {impact_sql("e", "field")} AS imp
      FROM (SELECT term, field, kc, (doc::int8 << 32) | tail AS e FROM lx) p) p
GROUP BY term, field, kc
"""

#: deleting rows takes their postings out of the blocks or delta rows that hold them (found by
#: their impact, within the range of one block) and lowers their terms' document frequencies;
#: returns the rows and tokens gone (the generation's statistics). Parameters: vault, generation, keys
DELETE_ROWS = f"""
WITH gone AS (
    DELETE FROM memvault_rows WHERE vault = %(vault)s AND generation = %(generation)s AND key = ANY(%(keys)s)
    RETURNING doc, {KIND_SQL.format("kind")} AS kc, lex, lex_tf, text_len, ctx_len
),
f AS MATERIALIZED (
    SELECT x.k >> 2 AS term, (x.k & 3)::int2 AS field, g.kc, (g.doc::int8 << 32) | x.t::int8 AS e,
           {TF_SQL.format("x.t")} AS tf
    FROM gone g CROSS JOIN LATERAL unnest(g.lex, g.lex_tf) AS x(k, t)
),
hit AS (
    SELECT b.at, array_agg(f.e) AS es FROM f CROSS JOIN LATERAL (
        (SELECT p.ctid AS at FROM {{postings}} p WHERE p.tier = 0 AND p.term = f.term AND p.field = f.field
             AND p.kind = f.kc AND p.entries @> ARRAY[f.e] LIMIT 1)
        UNION ALL
        (SELECT p.ctid FROM {{postings}} p WHERE p.tier = 1 AND p.term = f.term AND p.field = f.field
             AND p.kind = f.kc AND p.top >= {impact_sql("f.e", "f.field")} AND p.entries @> ARRAY[f.e]
         ORDER BY p.top LIMIT 1)
        LIMIT 1) b
    GROUP BY b.at
),
dp AS (
    UPDATE {{postings}} p SET n = p.n - cardinality(h.es),
        entries = coalesce((SELECT array_agg(x.e ORDER BY x.o) FROM unnest(p.entries) WITH ORDINALITY AS x(e, o)
                            WHERE x.e <> ALL(h.es)), '{{{{}}}}')
    FROM hit h WHERE p.ctid = h.at
),
dt AS (
    UPDATE {{terms}} t SET df_text = t.df_text - d.df_text, df_ctx = t.df_ctx - d.df_ctx, df_cjk = t.df_cjk - d.df_cjk
    FROM (SELECT term, count(*) FILTER (WHERE field = 0) AS df_text, count(*) FILTER (WHERE field = 1) AS df_ctx,
                 count(*) FILTER (WHERE field = 2) AS df_cjk
          FROM f GROUP BY term) d
    WHERE t.id = d.term
)
SELECT count(*), coalesce(sum(text_len), 0), coalesce(sum(ctx_len), 0),
       (SELECT coalesce(sum(f.tf), 0) FROM f WHERE f.field = 2) FROM gone
"""

#: the delta's postings into the sealed blocks: each into the block with the smallest top at or
#: above its impact (the list's best block when none is), each block that gained some rewritten
#: with them, split in pieces of BLOCK best first once it holds more than 2 x BLOCK; a list
#: with no block yet is cut the same way. Blocks emptied by deletes go. {target} finds a
#: posting's block (NULL::tid where the generation has no sealed block: a rebuild's load)
MERGE_SQL = f"""
WITH d AS MATERIALIZED (
    DELETE FROM {{postings}} WHERE tier = 0 RETURNING term, field, kind, entries
),
e AS MATERIALIZED (
    SELECT d.term, d.field, d.kind, x.e, {impact_sql("x.e", "d.field")} AS imp
    FROM d CROSS JOIN LATERAL unnest(d.entries) AS x(e)
),
t AS MATERIALIZED (
    SELECT e.*, {{target}} AS at FROM e
),
old AS (
    DELETE FROM {{postings}} b WHERE b.ctid = ANY(ARRAY(SELECT DISTINCT at FROM t WHERE at IS NOT NULL))
        AND b.tier = 1
    RETURNING b.ctid AS at, b.term, b.field, b.kind, b.entries
),
empty AS (
    DELETE FROM {{postings}} b WHERE b.tier = 1 AND b.n = 0
),
pooled AS (
    SELECT o.at, o.term, o.field, o.kind, x.e, {impact_sql("x.e", "o.field")} AS imp
    FROM old o CROSS JOIN LATERAL unnest(o.entries) AS x(e)
    UNION ALL
    SELECT at, term, field, kind, e, imp FROM t
),
ranked AS (
    SELECT p.*, row_number() OVER (PARTITION BY term, field, kind, at ORDER BY imp DESC, e) AS rank,
           count(*) OVER (PARTITION BY term, field, kind, at) AS total
    FROM pooled p
)
INSERT INTO {{postings}} (vault, generation, tier, term, field, kind, top, low, n, entries)
SELECT %(vault)s, %(generation)s, 1, term, field, kind, max(imp), min(imp), count(*), array_agg(e ORDER BY imp DESC, e)
FROM ranked GROUP BY term, field, kind, at, CASE WHEN total > {{twice}} THEN (rank - 1) / {{block}} ELSE 0 END
"""
_TARGET = """coalesce(
    (SELECT b.ctid FROM {postings} b WHERE b.tier = 1 AND b.term = e.term AND b.field = e.field AND b.kind = e.kind
         AND b.top >= e.imp ORDER BY b.top LIMIT 1),
    (SELECT b.ctid FROM {postings} b WHERE b.tier = 1 AND b.term = e.term AND b.field = e.field AND b.kind = e.kind
     ORDER BY b.top DESC LIMIT 1))"""


def delta_postings(conn, postings: str) -> int:
    """How many postings wait in the delta (at most MERGE_AT and one apply's, once merges run)."""
    return conn.execute(f"SELECT coalesce(sum(n), 0) FROM {postings} WHERE tier = 0").fetchone()[0]


def merge_delta(conn, postings: str, vault: str, generation: int) -> None:
    """Seal the delta into the blocks, in the caller's transaction (see MERGE_SQL)."""
    sealed = conn.execute(f"SELECT EXISTS (SELECT FROM {postings} WHERE tier = 1)").fetchone()[0]
    target = _TARGET.format(postings=postings) if sealed else "NULL::tid"
    sql = MERGE_SQL.format(postings=postings, target=target, block=lexical.BLOCK, twice=2 * lexical.BLOCK)
    conn.execute(sql, {"vault": vault, "generation": generation})


def merge_if_due(conn, postings: str, vault: str, generation: int) -> bool:
    """Merge a serving generation's delta once it holds MERGE_AT postings; a generation not yet
    serving (a rebuild's load) is merged once, when it is activated. True if merged."""
    if delta_postings(conn, postings) < lexical.MERGE_AT:
        return False
    serving = conn.execute("SELECT serving FROM memvault_vaults WHERE name = %s", (vault,)).fetchone()
    if serving is None or serving[0] != generation:
        return False
    merge_delta(conn, postings, vault, generation)
    return True
