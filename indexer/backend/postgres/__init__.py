"""PostgreSQL (16+) + pgvector (0.8+) as a vault's index backend: one partition per vault,
generations switched by one pointer row, BM25 computed from the server's own statistics, and
row-level security bound to per-vault roles (docs/team.md)."""
