"""Search shows a memory's instant in the vault's zone, with its offset, on every surface
(issue 24, item 5): the CLI's text and --json, through a running owner, MCP's MemoryRecall and
the Python API. A hand-typed bullet of 2 December in Amsterdam is `2026-12-02T00:00:00+01:00`,
never `2026-12-01T23:00:00+00:00`."""

import json
from datetime import timedelta

import anyio
import pytest
from click.testing import CliRunner
from mcp import Client

from memvault import MemoryStore
from memvault.cli.main import cli
from memvault.cli.mcp_tools import RECALL
from tests.engine_helpers import OwnerProcess, memvault_json
from tests.postgres_helpers import on_test_backend
from tests.test_mcp import body_of, make_vault, params

pytestmark = pytest.mark.both_backends

LOCAL = "2026-12-02T00:00:00+01:00"  # the bullet's day starts at local midnight
TIMED = "2026-12-02T09:30:00+01:00"
NESTED = "2026-07-01T08:00:00+02:00"  # summer time: the offset follows the date


def vault_with_bullets(tmp_path):
    root = on_test_backend(make_vault(tmp_path, "v"))  # Europe/Amsterdam
    (root / "daily" / "2026-12-02.md").write_text("# 2026-12-02\n\n- The heating engineer comes back in spring.\n"
                                                  "- 09:30 The boiler pressure is 1.5 bar.\n")  # fmt: skip
    nested = root / "daily" / "2026" / "07"
    nested.mkdir(parents=True)
    (nested / "2026-07-01.md").write_text("# 2026-07-01\n\n- 08:00 The garden tap was winterised late.\n")
    return root


def test_cli_text_json_and_the_python_api_show_the_vaults_zone(tmp_path):
    root = vault_with_bullets(tmp_path)
    text = CliRunner().invoke(cli, ["--vault", str(root), "search", "heating engineer"], catch_exceptions=False)
    assert LOCAL in text.output and "+00:00" not in text.output, text.output
    done = CliRunner().invoke(cli, ["--vault", str(root), "search", "garden tap winterised", "--json"],
                              catch_exceptions=False)  # fmt: skip
    hit = json.loads(done.output)["hits"][0]
    assert hit["at"] == NESTED and hit["date"] == "2026-07-01"  # and the nested layout's date
    with MemoryStore.open(root) as store:
        at = store.recall("boiler pressure").hits[0].at
    assert at.isoformat() == TIMED and at.utcoffset() == timedelta(hours=1) and str(at.tzinfo) == "Europe/Amsterdam"


def test_through_a_running_owner_and_mcp(tmp_path):
    root = vault_with_bullets(tmp_path)
    owner = OwnerProcess(root, "serve").wait_serving()
    try:
        assert memvault_json(root, "search", "heating engineer")["hits"][0]["at"] == LOCAL
    finally:
        owner.stop()

    async def recall():
        async with Client(params(root), read_timeout_seconds=120) as client:
            return body_of(await client.call_tool(RECALL, {"query": "boiler pressure"}))

    assert anyio.run(recall)["hits"][0]["at"] == TIMED
