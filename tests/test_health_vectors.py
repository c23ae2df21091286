"""Plain `memvault health` checks that the serving vector index loads whole: a truncated, corrupt
or missing vector segment, a log damaged inside (not a torn tail), or a missing vectors folder is
unhealthy, exit 1, with `memvault rebuild` as the fix."""

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
        store.rebuild()  # the vectors as a sealed segment (vectors.py), then one more in the log
        store.remember("Ana keeps bees on the roof.")
        assert store._semantic.drain(60)
    return root


def health(root):
    result = CliRunner().invoke(cli, ["--vault", str(root), "health", "--json"])
    return result.exit_code, json.loads(result.output)


def vectors_folder(root):
    current = (root / ".index" / "CURRENT").read_text().strip()
    return root / ".index" / current / "vectors"


def vectors_file(root):
    """The sealed segment's graph: what a rebuild wrote."""
    (graph,) = vectors_folder(root).glob("seg-*.hnsw")
    return graph


def log_file(root):
    (log,) = vectors_folder(root).glob("log-*.bin")
    return log


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


def corrupt_inside_the_log(root):
    """A byte of the first of two records flipped: damage, not the torn tail a crash leaves."""
    log = log_file(root)
    data = bytearray(log.read_bytes())
    data[12 + 30] ^= 0xFF  # past the 12-byte header, inside the first record's key
    log.write_bytes(bytes(data))


def test_intact_vectors_are_healthy(journal_vault):
    code, body = health(journal_vault)
    assert code == 0 and body["healthy"] is True, body
    assert "vector_index" in body["checks"]


@pytest.mark.parametrize(
    "damage",
    [truncate, corrupt, remove_file, remove_folder, corrupt_inside_the_log],
    ids=lambda f: f.__name__,
)
def test_damaged_vectors_are_not_healthy(journal_vault, damage):
    with MemoryStore.open(journal_vault) as store:  # a second record in the log
        store.remember("Noor sails on Sundays.")
        assert store._semantic.drain(60)
    damage(journal_vault if damage is corrupt_inside_the_log else vectors_file(journal_vault))
    code, body = health(journal_vault)
    assert code == 1 and body["healthy"] is False
    found = [f for f in body["findings"] if f["check"] == "vector_index"]
    assert found and found[0]["severity"] == "error", body["findings"]
    assert found[0]["code"] in ("vectors_missing", "vectors_unreadable")
    assert "memvault rebuild" in json.dumps(body)
    result = CliRunner().invoke(cli, ["--vault", str(journal_vault), "rebuild"])
    assert result.exit_code == 0, result.output
    assert health(journal_vault)[0] == 0
