"""BuJo commands: adopt-replay (metadata-only trust on first use), consolidate, and `capture test`."""

import click

from memvault.cli.app import cli, open_store, require_no_owner
from memvault.cli.errors import emit_json, json_option


@cli.command("adopt-replay")
@json_option
@click.pass_context
def adopt_replay_command(ctx: click.Context, json_: bool) -> None:
    """Adopt the index's replay state as the vault's replay sidecar; then run `memvault rebuild`.

    For a BuJo vault whose index holds replay state (supersession lifecycle, thread edges) but
    which has no .replay-projection-v1.json. Needs a stopped agent. Every entry is attested
    against the durable intake (records, receipts, ledger) before anything is written; one
    unattested entry refuses the whole adoption. Reads and writes metadata only. Never start
    the agent between this command and the rebuild that must follow it.
    """
    from memvault.indexer.maintenance.replay_adopt import adopt_replay
    from memvault.vault.clock import utc_now

    require_no_owner(ctx, "memvault adopt-replay")
    store = open_store(ctx, sync=False)
    try:
        report = adopt_replay(store.layout, store.config, utc_now())
    finally:
        store.close()
    if json_:
        emit_json(report)
    elif report["adopted"]:
        click.echo(
            f"adopted {report['entries']} replay entries into .replay-projection-v1.json; now run `memvault rebuild`"
        )
    else:
        click.echo(f"nothing adopted ({report['reason'].replace('_', ' ')})")


@cli.command("consolidate")
@json_option
@click.pass_context
def consolidate_command(ctx: click.Context, json_: bool) -> None:
    """Regenerate index.md: recent days, counts, top entities, duplicate groups.

    Makes no model call and never changes daily/, audit/, graph.jsonl or the replay sidecar;
    only the marked block of index.md is memvault's (text outside it is kept). `memvault watch`
    runs the same consolidation on a schedule.
    """
    with open_store(ctx) as store:
        report = store.consolidate()
    if json_:
        emit_json(report.to_json())
        return
    state = "updated" if report.changed else "unchanged"
    click.echo(
        f"index.md {state}: {report.curated} curated memories ({report.superseded} superseded), "
        f"{report.entities} entities, {report.duplicate_fact_groups + report.duplicate_entity_groups} duplicate groups"
    )


SAMPLE_TURN = (
    "user: Can you write down what we settled in today's planning meeting?\n"
    "assistant: Sure. Morgan leads Project Atlas from now on, the Atlas launch is on March 15, "
    "and the team chose PostgreSQL for the billing service."
)


@cli.group("capture")
def capture_group() -> None:
    """Check BuJo capture against the configured chat model."""


@capture_group.command("test")
@click.option("--text", "text", default=None, help="The turn to send (default: a built-in sample planning turn).")
@json_option
@click.pass_context
def capture_test_command(ctx: click.Context, text: str | None, json_: bool) -> None:
    """Send one turn through the configured chat model and show what capture would store, and why.

    Makes the real extraction call (and, when existing memories are close, the reconciliation
    call, each with its repair call if needed) against memory.llm, looks up close memories in
    the index, and prints the facts, entities and relations a capture would commit, or why it
    would commit nothing (an invalid answer, an empty extraction). Writes nothing: no fact, no
    graph line, no plan, no intake record.
    """
    from memvault.indexer.services.capture import CaptureService
    from memvault.vault.clock import utc_now

    with open_store(ctx, sync=False) as store:
        service = CaptureService(store)
        result = service.dry_run(text if text is not None else SAMPLE_TURN, now=utc_now())
        model = service.model()
    report = _capture_test_report(result, model)
    if json_:
        emit_json(report)
        return
    click.echo(
        f"model: {report['model']}; {report['calls']} call(s), {report['repairs']} repair(s); "
        f"schema sent as {report['schemaForm']}"
    )
    if report["failure"]:
        click.echo(f"would store nothing: {report['failure']}: {report['problem']}")
        return
    if not report["facts"] and not report["noops"]:
        click.echo("would store nothing: the model found no durable memory in this turn")
    for fact in report["facts"]:
        click.echo(f"{fact['action']:>9}  {fact['text']}  ({fact['why']})")
    for noop in report["noops"]:
        click.echo(f"     noop  memory {noop['index']}: already stored as {noop['target']}")
    for entity in report["entities"]:
        click.echo(f"   entity  {entity['name']} ({entity['type']})")
    for relation in report["relations"]:
        click.echo(f" relation  {relation['from']} {relation['relation']} {relation['to']}")


def _capture_test_report(result, model) -> dict:
    names = {}
    report = {"model": repr(model), "calls": result.calls, "repairs": result.repairs, "substantive": result.substantive,
              "schemaForm": _schema_form(model), "schemaFallback": getattr(model, "schema_fallback", None),
              "failure": result.failure, "problem": result.problem, "facts": [], "noops": [], "entities": [],
              "relations": []}  # fmt: skip
    plan = result.plan
    if plan is None:
        return report
    for entity_id, name, kind in plan.entities:
        names[entity_id] = name
        report["entities"].append({"id": entity_id, "name": name, "type": kind})
    why = {"add": "new: no existing memory says this", "update": "refines {}", "supersede": "replaces {}"}
    for fact in plan.facts:
        report["facts"].append({"action": fact.action, "text": fact.text, "target": fact.target,
                                "salience": fact.salience, "why": why[fact.action].format(fact.target)})  # fmt: skip
    report["noops"] = [{"index": index, "target": target} for index, target in plan.noops]
    report["relations"] = [
        {"from": names.get(a, a), "relation": r, "to": names.get(b, b)} for a, r, b in plan.relations
    ]
    return report


def _schema_form(model) -> str:
    from memvault.indexer.services.chat import SCHEMA_FORMS

    modes = SCHEMA_FORMS.get(getattr(model, "provider", ""), ("unknown",))
    return modes[min(getattr(model, "schema_mode", 0), len(modes) - 1)]
