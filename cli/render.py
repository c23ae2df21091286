"""Human-readable output for the CLI (JSON output is each result's own `to_json`)."""

import click


def print_recall(result, explain: bool = False) -> None:
    if result.guidance:
        click.echo(result.guidance)
    if result.degraded:
        click.echo(f"degraded: {result.degraded}", err=True)
    if not result.hits:
        click.echo("No memories found.")
        return
    for rank, hit in enumerate(result.hits, 1):
        click.echo(f"{rank:>2}. {hit.text}")
        click.echo(f"    {hit.source}  score {hit.score:.4f}  {hit.at.isoformat()}")
        if len(hit.sources) > 1:
            click.echo(f"    also in: {', '.join(hit.sources[1:])}")
        if explain:
            for retriever, detail in sorted(hit.explain.items()):
                click.echo(f"    {retriever}: {detail}")
