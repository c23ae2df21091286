"""Shared helpers for the intake tests: vaults of each tier, a settable clock, quick admission."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from memvault.vault.intake.admission import admit_turn
from memvault.vault.intake.files import IntakeDirs

START = datetime(2026, 11, 30, 13, 3, tzinfo=UTC)


class Clock:
    """A clock tests move by hand."""

    def __init__(self, now: datetime = START):
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def make_vault(tmp_path: Path, mode: str = "lite", write_mode: str = "append-host-summary", name: str = "v") -> Path:
    data = default_config_data(mode=mode, time_zone="Europe/Amsterdam")
    data["memory"]["writeMode"] = write_mode
    root = tmp_path / name
    init_vault(root, render_config(data))
    from tests.postgres_helpers import on_test_backend

    return on_test_backend(root.resolve(), f"test-{name.lower()}")  # a both_backends test's postgres run: on the server


def store_for(root: Path, clock=None):
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.config import load_config
    from memvault.vault.layout import VaultLayout

    config = load_config(root, {})  # an index block (a both_backends test's postgres run): the server's engine
    return MemoryStore(VaultLayout(root), config, clock=clock or Clock())


def admit(
    root: Path,
    run_id: str,
    answer: str = "Deployed the fix and closed the incident.",
    *,
    now=START,
    write_mode="append-host-summary",
    tier="lite",
    **turn,
):
    return admit_turn(IntakeDirs(root), run_id=run_id, answer=answer, write_mode=write_mode, tier=tier, now=now, **turn)


def intake_files(root: Path) -> list[str]:
    base = root / ".capture-intake"
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.exists() else []
