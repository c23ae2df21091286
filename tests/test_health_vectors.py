"""Plain `memvault health` checks that the serving vector index loads whole: a truncated, corrupt
or missing `vectors.hnsw` (or vectors folder) is unhealthy, exit 1, with `memvault rebuild` as the fix."""

import json
import os

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.engine.store import MemoryStore
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault

pytestmark = pytest.mark.one_engine(
    "these tests damage the local vector lane's hnswlib file (.index/gen-*/vectors/), the local engine's own"
)


@pytest.fixture
def journal_vault(tmp_path):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="UTC")))
    with MemoryStore.open(root) as store:
        store.remember("Priya lives in Rotterdam.")
        store.remember("Morgan chose blue as the deployment color.")
        assert store._semantic.drain(60)
    return root


def health(root):
    result = CliRunner().invoke(cli, ["--vault", str(root), "health", "--json"])
    return result.exit_code, json.loads(result.output)


def vectors_file(root):
    current = (root / ".index" / "CURRENT").read_text().strip()
    return root / ".index" / current / "vectors" / "vectors.hnsw"


def truncate(path):
    os.truncate(path, path.stat().st_size // 2)


def corrupt(path):
    data = bytearray(path.read_bytes())
    for offset in range(64, len(data), 97):
        data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def remove_file(path):
    path.unlink()


def remove_folder(path):
    for child in path.parent.iterdir():
        child.unlink()
    path.parent.rmdir()


def test_intact_vectors_are_healthy(journal_vault):
    code, body = health(journal_vault)
    assert code == 0 and body["healthy"] is True, body
    assert "vector_index" in body["checks"]


@pytest.mark.parametrize("damage", [truncate, corrupt, remove_file, remove_folder], ids=lambda f: f.__name__)
def test_damaged_vectors_are_not_healthy(journal_vault, damage):
    damage(vectors_file(journal_vault))
    code, body = health(journal_vault)
    assert code == 1 and body["healthy"] is False
    found = [f for f in body["findings"] if f["check"] == "vector_index"]
    assert found and found[0]["severity"] == "error", body["findings"]
    assert found[0]["code"] in ("vectors_missing", "vectors_unreadable")
    assert "memvault rebuild" in json.dumps(body)
    result = CliRunner().invoke(cli, ["--vault", str(journal_vault), "rebuild"])
    assert result.exit_code == 0, result.output
    assert health(journal_vault)[0] == 0
