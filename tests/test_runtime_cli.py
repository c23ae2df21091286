"""`memvault runtime|doc|space` through click, on real vaults."""

import json

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli


def run(vault, *args, ok=True, input=None):
    result = CliRunner().invoke(cli, ["--vault", str(vault), *args], catch_exceptions=False, input=input)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_runtime_add_replace_remove_show(new_vault):
    assert "added: USER revision 1" in run(new_vault, "runtime", "add", "user", "Prefers metric units.").output
    receipt = json.loads(
        run(new_vault, "runtime", "add", "MEMORY", "Deploys on Tuesdays.", "--importance", "5", "--json").output
    )
    assert (receipt["status"], receipt["target"], receipt["revision"]) == ("added", "MEMORY", 2)
    run(new_vault, "runtime", "replace", "MEMORY", "Tuesdays", "Deploys on Wednesdays.")
    shown = json.loads(run(new_vault, "runtime", "show", "--json").output)
    assert shown["revision"] == 3 and shown["files"] == {"USER": "current", "MEMORY": "current"}
    assert [e["content"] for e in shown["targets"]["MEMORY"]["entries"]] == ["Deploys on Wednesdays."]
    assert shown["targets"]["MEMORY"]["entries"][0]["importance"] == 5
    run(new_vault, "runtime", "remove", "USER", "metric")
    text = run(new_vault, "runtime", "show").output
    assert "revision 4" in text and "Prefers metric units." not in text


def test_errors_exit_1_with_a_message_or_json(new_vault):
    result = run(new_vault, "runtime", "remove", "USER", "nothing", ok=False)
    assert result.exit_code == 1 and "no USER entry contains" in result.output
    result = run(new_vault, "runtime", "remove", "USER", "nothing", "--json", ok=False)
    assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == "no_match"
    assert run(new_vault, "runtime", "add", "NOTES", "x", ok=False).exit_code == 2  # usage error


def test_general_strategy_flag_rejects_an_over_budget_write(new_vault):
    for n in range(4):
        run(new_vault, "runtime", "add", "USER", f"Fact {n} " + "x" * 1000)
    result = run(new_vault, "runtime", "add", "USER", "one more " + "y" * 100, "--strategy", "general", ok=False)
    assert result.exit_code == 1 and "General strategy" in result.output
    result = run(new_vault, "runtime", "add", "USER", "one more " + "y" * 100, ok=False)
    assert result.exit_code == 1 and "no chat model" in result.output  # a lite vault has no memory.llm


def test_doc_commands(new_vault, tmp_path):
    body = tmp_path / "body.md"
    body.write_text("# Runbook\n\nStep 1: build.\n")
    created = json.loads(
        run(new_vault, "doc", "create", "Deploy runbook", "--file", str(body), "--summary", "How", "--json").output
    )
    assert (created["status"], created["id"], created["revision"]) == ("created", "deploy-runbook", 1)
    run(new_vault, "doc", "update", "deploy-runbook", "--file", "-", "--expected-revision", "1", input="Step 2\n")
    stale = run(new_vault, "doc", "update", "deploy-runbook", "--body", "x", "--expected-revision", "1", ok=False)
    assert stale.exit_code == 1 and "revision 2, not 1" in stale.output
    listed = json.loads(run(new_vault, "doc", "list", "--json").output)
    assert [d["id"] for d in listed["documents"]] == ["deploy-runbook"] and listed["limitBytes"] == 65536
    run(new_vault, "doc", "archive", "deploy-runbook")
    listed = json.loads(run(new_vault, "doc", "list", "--archived", "--json").output)
    assert listed["documents"] == [] and listed["archived"] == ["documents/archived/deploy-runbook.md"]
    assert run(new_vault, "doc", "create", "No body", ok=False).exit_code == 2


@pytest.mark.one_engine(
    "the index this test opens is the memory space's own (spaces/<id>/), which the catalog configures "
    "itself; it does not follow the test vault's index block"
)
def test_space_commands_and_archive_indexing(new_vault, tmp_path):
    roots = ["--spaces-root", str(tmp_path / "store")]
    assert "created space default" in run(new_vault, "space", "create", "Work", *roots).output
    other = json.loads(run(new_vault, "space", "create", "Home", "--inactive", "--json", *roots).output)
    spaces = json.loads(run(new_vault, "space", "list", "--json", *roots).output)["spaces"]
    assert [(s["id"], s["active"]) for s in spaces] == [("default", True), (other["id"], False)]
    run(new_vault, "doc", "create", "Notes", "--body", "text")
    archived = json.loads(run(new_vault, "doc", "archive", "notes", "--json", *roots).output)
    assert archived["archived"][0]["indexed"] is True
    assert list((tmp_path / "store/default/daily").glob("*.md"))
    assert "No memory spaces yet" in run(new_vault, "space", "list").output  # the default root is separate


def test_every_new_command_has_help(new_vault):
    for group in ("runtime", "doc", "space"):
        output = run(new_vault, group, "--help").output
        assert "Usage" in output
    for command in (("runtime", "show"), ("runtime", "add"), ("runtime", "replace"), ("runtime", "remove"),
                    ("doc", "create"), ("doc", "update"), ("doc", "archive"), ("doc", "list"),
                    ("space", "list"), ("space", "create")):  # fmt: skip
        lines = run(new_vault, *command, "--help").output.splitlines()
        assert len([line for line in lines if line.strip()]) > 3
