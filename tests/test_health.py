"""`memvault health [--strict] [--json]`: every finding, its severity, its fix, and the exit code."""

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance import health
from memvault.indexer.maintenance.health import ERROR, Finding, HealthReport, register_check
from tests import postgres_helpers

AMS = ZoneInfo("Europe/Amsterdam")


def codes(report) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def health_of(root, strict=False) -> HealthReport:
    """The store's own health report, on whichever backend the vault's index lives."""
    body = store_health(root, strict=strict)
    return HealthReport(
        body["strict"], tuple(body["checks"]), tuple(Finding(**f) for f in body["findings"]), body["details"]
    )


def store_health(root, strict=False) -> dict:
    """The store's own health report (JSON), on whichever backend the vault's index lives."""
    with MemoryStore.open(root, sync=False) as store:
        return store.health_report(strict=strict)


def json_codes(report: dict) -> dict[str, str]:
    return {f["code"]: f["severity"] for f in report["findings"]}


@pytest.fixture
def clean_vault(new_vault):
    with MemoryStore.open(new_vault) as store:
        for i, text in enumerate(["Morgan chose blue.", "Standup moved to 10:00.", "Priya booked the train."]):
            store.remember(text, at=datetime(2026, 11, 28 + i % 2, 9, i, tzinfo=AMS))
    return new_vault


def invoke(root, *args):
    return CliRunner().invoke(cli, ["--vault", str(root), "health", *args])


@pytest.mark.both_backends
def test_a_clean_vault_is_healthy_even_strictly(clean_vault):
    report = store_health(clean_vault, strict=True)
    assert report["healthy"] and report["findings"] == []
    assert report["details"]["rows"] == 3 and "rows" in report["checks"]
    result = invoke(clean_vault, "--strict")
    assert result.exit_code == 0 and result.output.startswith("healthy (strict")


@pytest.mark.both_backends
def test_no_index_is_an_error_with_the_rebuild_fix(new_vault):
    (new_vault / "daily/2026-11-30.md").write_text("- 09:00 a hand-written fact\n")
    result = invoke(new_vault, "--json")
    body = json.loads(result.output)
    assert result.exit_code == 1 and not body["healthy"]
    assert body["findings"][0]["code"] == "index_unavailable" and body["fixes"][0] == "memvault rebuild"


@pytest.mark.both_backends
def test_edits_the_index_has_not_seen_are_stale_missing_and_extra_rows(clean_vault):
    note = clean_vault / "daily/2026-11-28.md"
    note.write_text(note.read_text().replace("Morgan chose blue.", "Morgan chose green.") + "- 11:00 brand new\n")
    (clean_vault / "daily/2026-11-29.md").unlink()
    (clean_vault / "daily/2026-11-27.md").write_text("- 09:00 never indexed\n")
    fast = store_health(clean_vault)
    assert json_codes(fast) == {"stale_file": ERROR, "vanished_file": ERROR, "unindexed_file": ERROR}
    strict = store_health(clean_vault, strict=True)
    assert {"missing_row", "extra_row", "stale_file"} <= set(json_codes(strict))
    result = invoke(clean_vault)
    assert result.exit_code == 1 and "Fix:\n  memvault rebuild" in result.output
    with MemoryStore.open(clean_vault):  # opening syncs: the fix for lag is any open, or a rebuild
        pass
    assert store_health(clean_vault, strict=True)["healthy"]


@pytest.mark.both_backends
def test_a_row_changed_behind_the_manifest_is_caught_by_strict_only(clean_vault):
    with MemoryStore.open(clean_vault) as store:
        key = postgres_helpers.tamper_a_row(store)  # a row rewritten with other text, stat untouched
    assert health_of(clean_vault).healthy
    strict = health_of(clean_vault, strict=True)
    assert [f.code for f in strict.errors] == ["stale_row"] and "text" in strict.errors[0].message
    assert strict.errors[0].subject == key


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "content, code, fix",
    [
        ("- 09:00 ok \xff", "invalid_utf8", "re-save"),
        ("- 09:00 first ^m-aaaaaaaaaa\n- 09:05 pasted ^m-aaaaaaaaaa\n", "duplicate_id", "remove the repeated ^id"),
        ("---\ntimeZone: Mars/Olympus\n---\n- 09:00 on mars\n", "frontmatter_zone", "fix the timeZone"),
    ],
)
def test_hand_edits_are_warnings_that_fail_only_strict(clean_vault, content, code, fix):
    # (merge-conflict markers are an error since issue 44: tests/test_git_merge.py)
    path = clean_vault / "daily/2026-11-27.md"
    path.write_bytes(content.encode("latin-1") if "\xff" in content else content.encode())
    with MemoryStore.open(clean_vault):
        pass
    report = health_of(clean_vault)
    finding = next(f for f in report.findings if f.code == code)
    assert finding.severity == "warning" and finding.subject == "daily/2026-11-27.md" and fix in finding.fix
    assert report.healthy and not health_of(clean_vault, strict=True).healthy
    assert invoke(clean_vault).exit_code == 0 and invoke(clean_vault, "--strict").exit_code == 1
    if code == "invalid_utf8":
        assert "byte 11" in finding.message


@pytest.mark.both_backends
def test_embedding_identity_mismatch_needs_a_rebuild(clean_vault):
    with MemoryStore.open(clean_vault) as store:
        other_model = {"provider": "ollama", "model": "nomic-embed-text:v1.5", "dim": 768}
        postgres_helpers.set_built_embedding(store, other_model)
    report = health_of(clean_vault)
    assert codes(report) == {"embedding_mismatch": ERROR}
    assert "ollama/nomic-embed-text:v1.5/768" in report.findings[0].message
    with MemoryStore.open(clean_vault, sync=False) as store:
        store.rebuild()
    assert health_of(clean_vault).healthy


@pytest.mark.both_backends
def test_stray_generation_from_a_killed_rebuild_is_reported_and_swept_by_rebuild(clean_vault):
    with MemoryStore.open(clean_vault) as store:
        stray = postgres_helpers.leave_a_stray_generation(store)
    report = health_of(clean_vault)
    assert codes(report) == {"stray_generation": "warning"} and report.findings[0].subject == stray
    with MemoryStore.open(clean_vault, sync=False) as store:
        store.rebuild()
        assert not postgres_helpers.stray_left(store, stray)
    assert health_of(clean_vault, strict=True).healthy


@pytest.mark.both_backends
def test_intake_counts_are_reported(clean_vault):
    with MemoryStore.open(clean_vault) as store:
        store.persist_completed_turn("run-health-1", "We decided the launch colour is teal.")
    report = health_of(clean_vault)
    assert report.details["intake"]["pending"] + report.details["intake"]["resolved"] >= 1


@pytest.mark.both_backends
def test_other_parts_can_register_checks(clean_vault):
    def sidecar(ctx):
        yield Finding(
            "sidecar", ERROR, "canonical_mismatch", ".replay-projection-v1.json", "differs", "memvault rebuild"
        )

    register_check("sidecar", sidecar, strict_only=True)
    try:
        assert health_of(clean_vault).healthy
        report = health_of(clean_vault, strict=True)
        assert "sidecar" in report.checks and codes(report) == {"canonical_mismatch": ERROR}
    finally:
        health.CHECKS[:] = [c for c in health.CHECKS if c[0] != "sidecar"]


@pytest.mark.both_backends
def test_health_never_repairs(clean_vault):
    (clean_vault / "daily/2026-11-27.md").write_text("- 09:00 unseen\n")
    before = sorted(p.name for p in (clean_vault / ".index").rglob("*"))
    assert invoke(clean_vault, "--strict", "--json").exit_code == 1
    assert invoke(clean_vault).exit_code == 1, "still unhealthy: health looked, it did not sync"
    assert sorted(p.name for p in (clean_vault / ".index").rglob("*")) == before


@pytest.mark.both_backends
def test_corrupt_manifest_is_reported_not_raised(clean_vault):
    with MemoryStore.open(clean_vault) as store:
        postgres_helpers.break_the_serving_index(store)
    report = health_of(clean_vault)
    assert codes(report)["index_unavailable"] == ERROR and "rebuild" in report.fixes()[0]
    postgres_helpers.lose_the_index(clean_vault)
    assert not health_of(clean_vault).healthy
