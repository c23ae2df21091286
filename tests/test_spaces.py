"""Memory spaces: the catalog, ids, activation, verified writes, and fused concurrent recall."""

import json
import re
import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memvault.indexer.results import RecallHit
from memvault.indexer.runtime.recall import _verify_in_files, fuse, recall_spaces, write_to_space
from memvault.vault.errors import InvalidRecord, UnsafePath
from memvault.vault.spaces import MODEL_CATALOG_LIMIT, SpaceCatalog
from tests.postgres_helpers import on_test_backend

REPO = Path(__file__).resolve().parent.parent
AT = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def catalog(tmp_path):
    return SpaceCatalog(tmp_path / "spaces")


def on_backend(catalog: SpaceCatalog, *spaces):
    """Spaces' vaults on a both_backends test's engine (each its own vault on the server)."""
    for space in spaces:
        on_test_backend(catalog.path_of(space.id), f"space-{space.id}")
    return spaces


def test_the_first_space_is_default_and_later_ids_are_generated(catalog):
    first = catalog.create("Work", "work memory")
    second = catalog.create("Home")
    assert first.id == "default" and re.fullmatch(r"s-[0-9a-f]{8}", second.id)
    for space in (first, second):
        config = json.loads((catalog.path_of(space.id) / "memvault.json").read_text())
        assert config["memory"]["mode"] == "lite"
    assert [s.id for s in catalog.list()] == ["default", second.id]
    assert [s.id for s in catalog.eligible()] == ["default", second.id]


def test_a_folder_left_by_a_crashed_create_is_adopted(catalog):
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault

    init_vault(catalog.root / "default", render_config(default_config_data(mode="lite")))
    assert catalog.create("Work").id == "default"


def test_a_foreign_folder_in_the_way_is_refused(catalog):
    (catalog.root / "default").mkdir(parents=True)
    (catalog.root / "default/precious.txt").write_text("keep")
    with pytest.raises(Exception, match="not a memvault vault"):
        catalog.create("Work")
    assert (catalog.root / "default/precious.txt").read_text() == "keep"


def test_the_model_facing_catalog_is_capped_at_16_active_first(catalog):
    created = [catalog.create(f"Space {n}", active=n % 3 != 0) for n in range(20)]
    covers = catalog.model_catalog()
    assert len(covers) == MODEL_CATALOG_LIMIT == 16
    assert sum(s.active for s in created) == 13
    assert [c["active"] for c in covers] == [True] * 13 + [False] * 3
    assert set(covers[0]) == {"id", "title", "description", "active"}  # no paths or statistics
    assert len(catalog.list()) == 20


@pytest.mark.both_backends
def test_writing_to_an_inactive_space_activates_it(catalog):
    _, dormant = on_backend(catalog, catalog.create("Work"), catalog.create("Dormant", active=False))
    assert dormant.id not in [s.id for s in catalog.eligible()]
    write = write_to_space(catalog, dormant.id, "Morgan chose blue as the deployment color.")
    assert write.status == "added" and write.id.startswith("m-")
    space = catalog.get(dormant.id)
    assert space.active and space.last_write is not None
    again = write_to_space(catalog, dormant.id, "Morgan chose blue as the deployment color.")
    assert again.status == "duplicate" and again.id == write.id  # verified by recall as well


@pytest.mark.both_backends
def test_a_write_that_is_not_in_the_files_fails_verification(catalog):
    on_backend(catalog, catalog.create("Work"))
    write = write_to_space(catalog, "default", "A fact.")
    root = catalog.path_of("default")
    with pytest.raises(InvalidRecord, match="could not be verified"):
        _verify_in_files(root, "default", "m-0000000000", write.source, "A fact.")
    with pytest.raises(InvalidRecord, match="could not be verified"):
        _verify_in_files(root, "default", write.id, write.source, "Another fact.")


@pytest.mark.parametrize("space_id", ["../x", "default/../..", "/etc", "s-XYZ", "", "s-123", 7])
def test_hostile_space_ids_are_refused(catalog, space_id):
    with pytest.raises((InvalidRecord, UnsafePath)):
        catalog.path_of(space_id)


@pytest.mark.parametrize(
    "title, description", [("", ""), ("x" * 200, ""), ("ok", "d" * 600), ("bell\x07", ""), (None, "")]
)
def test_bad_titles_and_descriptions_are_refused(catalog, title, description):
    with pytest.raises(InvalidRecord):
        catalog.create(title, description)
    assert catalog.list() == []


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"format": "other", "spaces": []}',
        b'{"format": "memvault-spaces-v1", "spaces": [{"id": "default"}]}',
        (
            b'{"format": "memvault-spaces-v1", "spaces": [{"id": "../x", "title": "t", "description": "", '
            b'"active": true, "writable": true, "created": "c", "lastWrite": null}]}'
        ),
        (
            b'{"format": "memvault-spaces-v1", "spaces": [{"id": "default", "title": "t", "description": "", '
            b'"active": "yes", "writable": true, "created": "c", "lastWrite": null}]}'
        ),
    ],
)
def test_a_malformed_catalog_is_refused_with_the_fix(catalog, raw):
    catalog.root.mkdir(parents=True)
    (catalog.root / "spaces.json").write_bytes(raw)
    with pytest.raises(InvalidRecord, match="restore it"):
        catalog.list()


def test_a_duplicated_id_in_the_catalog_is_refused(catalog):
    catalog.create("Work")
    data = json.loads((catalog.root / "spaces.json").read_text())
    data["spaces"].append(dict(data["spaces"][0]))
    (catalog.root / "spaces.json").write_text(json.dumps(data))
    with pytest.raises(InvalidRecord, match="twice"):
        catalog.list()


CREATOR = textwrap.dedent(
    """
    import sys
    from memvault.vault.spaces import SpaceCatalog
    catalog = SpaceCatalog(sys.argv[1])
    for n in range(3):
        catalog.create(f"worker {sys.argv[2]} space {n}")
    """
)


@pytest.mark.slow
def test_concurrent_processes_create_distinct_spaces(catalog):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, str(catalog.root), str(w)], env=env, stderr=subprocess.PIPE, text=True
        )
        for w in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    spaces = catalog.list()
    assert len(spaces) == 12 and len({s.id for s in spaces}) == 12
    assert sum(s.id == "default" for s in spaces) == 1
    assert all((catalog.path_of(s.id) / "memvault.json").is_file() for s in spaces)


# --- fused recall ----------------------------------------------------------------------------


def hit(memory_id, text, score):
    return RecallHit(memory_id, text, f"daily/2026-03-01.md#^{memory_id}", score, AT)


def test_fuse_normalises_per_space_drops_weak_hits_and_dedupes_content():
    fused = fuse(
        {
            "default": [hit("m-a", "blue deploys", 8.0), hit("m-b", "green deploys", 4.0), hit("m-c", "noise", 1.0)],
            "s-11111111": [hit("m-d", "blue deploys", 0.9), hit("m-e", "red deploys", 0.6)],
        }
    )
    texts = [h.text for h in fused]
    assert texts[0] == "blue deploys"  # found in both spaces: fused once, ranked first
    assert texts.count("blue deploys") == 1
    assert "noise" not in texts  # 1/8 of its space's best: low relevance
    assert set(texts) == {"blue deploys", "green deploys", "red deploys"}
    assert fuse({"default": [hit("m-x", "x", 0.01)]})[0].quality == 1.0  # any score scale works


@pytest.mark.both_backends
def test_recall_runs_over_the_granted_spaces_and_reports_broken_ones(catalog):
    work, infra = on_backend(catalog, catalog.create("Work"), catalog.create("Infra"))
    write_to_space(catalog, work.id, "The deployment color is blue.")
    write_to_space(catalog, infra.id, "The staging database runs on port 5433.")
    write_to_space(catalog, infra.id, "The deployment pipeline uses blue-green switching.")
    result = recall_spaces(catalog, "deployment blue", [work.id, infra.id])
    assert {h.space_id for h in result.hits} == {work.id, infra.id}
    assert result.degraded == ()
    only_work = recall_spaces(catalog, "deployment blue", [work.id])
    assert {h.space_id for h in only_work.hits} == {work.id}
    shutil.rmtree(catalog.path_of(infra.id))
    broken = recall_spaces(catalog, "deployment blue", [work.id, infra.id])
    assert [h.space_id for h in broken.hits] == [work.id]
    assert len(broken.degraded) == 1 and broken.degraded[0].startswith(infra.id)
