"""Human-readable output for the CLI (JSON output is each result's own `to_json`)."""

import click


def print_recall(result, explain: bool = False) -> None:
    if result.guidance:
        click.echo(result.guidance)
    if result.degraded:
        click.echo(f"degraded: {result.degraded}", err=True)
    notes = getattr(result, "explain", None) or {}
    if explain and notes:  # what recall read from the question: its periods, its evidence, the reranker
        for period in notes.get("periods", ()):
            click.echo(f"period: {period['phrase']!r} = {period['from']} .. {period['through']} (and a week after)")
        if "evidence" in notes:
            click.echo(f"evidence: {notes['evidence']}")
        if "rerank" in notes:
            click.echo(f"rerank: {notes['rerank']}")
    if not result.hits:
        reason = getattr(result, "empty_reason", None)
        click.echo(f"No memories found: {reason}." if reason else "No memories found.")
        return
    for rank, hit in enumerate(result.hits, 1):
        click.echo(f"{rank:>2}. {hit.text}")
        click.echo(f"    {hit.source}  score {hit.score:.4f}  {hit.at.isoformat()}")
        if len(hit.sources) > 1:
            click.echo(f"    also in: {', '.join(hit.sources[1:])}")
        if explain:
            for retriever, detail in sorted(hit.explain.items()):
                click.echo(f"    {retriever}: {detail}")
    for relpath in sorted({hit.source.partition("#")[0] for hit in result.hits if getattr(hit, "conflict", False)}):
        click.echo(f"in conflict: hits from {relpath} stand in an unresolved merge conflict "
                   f"(memvault git resolve {relpath})")  # fmt: skip
