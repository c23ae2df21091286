"""The permanent ledger, its integrity catalog and schema marker: format, tampering, crash windows, pruning."""

import itertools
import os
import stat
from datetime import timedelta

import pytest

from memvault.vault.intake import resolve_together, state
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.catalog import CATALOG_BYTES, LedgerIntegrityError
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.ledger import ENTRY_BYTES, Ledger
from memvault.vault.intake.snapshot import inspect_run, ledger_status
from memvault.vault.intake.state import intake_lock, recover, resolve_run
from tests.intake_helpers import START, admit, make_vault


class SimulatedCrash(BaseException):
    """Stops a transition at a boundary in-process (the subprocess matrix does real SIGKILLs)."""


def crash_at(boundary):
    def hook(name):
        if name == boundary:
            raise SimulatedCrash(name)

    return hook


def run_in_shard(shard: int, skip: int = 0) -> str:
    """A run id whose intake id lands in ledger shard `shard`."""
    found = (f"run-{n}" for n in itertools.count() if intake_id_for(f"run-{n}")[:2] == f"{shard:02x}")
    return next(itertools.islice(found, skip, None))


def resolve(root, run_id, answer="Deployed the fix and closed the incident.", hook=None, now=START):
    result = admit(root, run_id, answer)
    assert result.status == "admitted", result
    dirs = IntakeDirs(root)
    with intake_lock(dirs):
        resolve_run(dirs, Ledger(dirs, create=True), result.id, outcome="projected", now=now, hook=hook)
    return result.id


@pytest.fixture
def root(tmp_path):
    return make_vault(tmp_path)


def test_fixed_entries_in_lazy_shards_with_a_fixed_catalog(root):
    ids = [resolve(root, run_in_shard(shard)) for shard in (0x00, 0x7F, 0xFF)]
    ledger_dir = root / ".capture-intake/ledger"
    assert sorted(os.listdir(ledger_dir)) == ["00.ledger", "7f.ledger", "ff.ledger"]
    for intake_id in ids:
        shard = ledger_dir / f"{intake_id[:2]}.ledger"
        data = shard.read_bytes()
        assert len(data) == ENTRY_BYTES == 129
        record_sha = state.read_receipt(IntakeDirs(root), intake_id).payload_sha256
        assert data == f"{intake_id}{record_sha}\n".encode()
        assert stat.S_IMODE(shard.stat().st_mode) == 0o600
    catalog = root / ".capture-intake/catalog"
    assert catalog.stat().st_size == CATALOG_BYTES and stat.S_IMODE(catalog.stat().st_mode) == 0o600
    assert Ledger(IntakeDirs(root), create=False).report().entries == 3


def _refused(root, run_id, match):
    result = admit(root, run_id, "Another turn entirely.")
    assert (result.status, result.reason) == ("failed", "ledger_integrity"), result
    assert match in result.message and "Fix:" in result.message
    dirs = IntakeDirs(root)
    with pytest.raises(LedgerIntegrityError, match=match):
        with intake_lock(dirs):
            recover(dirs, START)
    status = ledger_status(dirs)
    assert status["ok"] is False and match in status["problem"]


def test_truncated_shard_fails_closed_even_for_other_shards(root):
    intake_id = resolve(root, run_in_shard(0x10))
    resolve(root, run_in_shard(0x10, skip=1))
    shard = root / f".capture-intake/ledger/{intake_id[:2]}.ledger"
    shard.write_bytes(shard.read_bytes()[:ENTRY_BYTES])
    _refused(root, run_in_shard(0x10, skip=2), "truncated")
    _refused(root, run_in_shard(0x20), "truncated")  # the cheap size check covers every shard


def test_missing_shard_fails_closed(root):
    intake_id = resolve(root, run_in_shard(0x30))
    (root / f".capture-intake/ledger/{intake_id[:2]}.ledger").unlink()
    _refused(root, run_in_shard(0x30, skip=1), "missing")


def test_replaced_shard_with_valid_looking_bytes_fails_closed(root):
    intake_id = resolve(root, run_in_shard(0x40))
    shard = root / f".capture-intake/ledger/{intake_id[:2]}.ledger"
    forged = intake_id_for(run_in_shard(0x40, skip=5))
    shard.write_bytes(f"{forged}{'0' * 64}\n".encode())  # same size, well-formed, different run
    shard.chmod(0o600)
    _refused(root, run_in_shard(0x40, skip=1), "differ from what the catalog committed")


def test_deleted_ledger_and_catalog_with_the_marker_present_fail_closed(root):
    resolve(root, "run-a")
    for shard in (root / ".capture-intake/ledger").iterdir():
        shard.unlink()
    (root / ".capture-intake/catalog").unlink()
    _refused(root, "run-b", "schema marker says it existed")
    assert admit(root, "run-a").status == "failed"  # the deleted run cannot come back


def test_deleting_marker_too_is_still_refused_while_receipts_remain(root):
    resolve(root, "run-a")
    for shard in (root / ".capture-intake/ledger").iterdir():
        shard.unlink()
    (root / ".capture-intake/catalog").unlink()
    (root / ".capture-intake-schema").unlink()
    _refused(root, "run-b", "receipts exist")


def test_edited_catalog_fails_its_seal(root):
    resolve(root, "run-a")
    catalog = root / ".capture-intake/catalog"
    data = bytearray(catalog.read_bytes())
    slot = data.index(b"\n") + 1 + 3  # first slot's size field
    data[slot + 15] = ord("f")
    catalog.write_bytes(bytes(data))
    _refused(root, "run-b", "seal")


def test_missing_marker_beside_a_catalog_is_the_recoverable_creation_window(root):
    resolve(root, "run-a")
    (root / ".capture-intake-schema").unlink()
    assert admit(root, "run-b").status == "admitted"
    assert (root / ".capture-intake-schema").read_bytes() == b"memvault intake ledger schema v1\n"


def _crash_after_append(root, run_id, boundary="resolve.shard_appended"):
    with pytest.raises(SimulatedCrash):
        resolve(root, run_id, hook=crash_at(boundary))
    return intake_id_for(run_id)


def test_uncommitted_suffix_with_exact_receipts_is_adopted(root):
    intake_id = _crash_after_append(root, run_in_shard(0x50))
    dirs = IntakeDirs(root)
    assert Ledger(dirs, create=False).report().uncommitted == 1
    assert Ledger(dirs, create=False).lookup(intake_id) is None  # not committed yet
    assert admit(root, run_in_shard(0x50, skip=1)).status == "admitted"  # admission recovers first
    ledger = Ledger(dirs, create=False)
    assert ledger.lookup(intake_id) is not None and ledger.report().uncommitted == 0
    with intake_lock(dirs):
        _, report = recover(dirs, START)
    assert report.resolutions_finished == 1
    assert inspect_run(dirs, intake_id, START)["entries"][0]["state"] == "resolved"


def test_uncommitted_suffix_without_a_receipt_fails_closed(root):
    intake_id = _crash_after_append(root, run_in_shard(0x60))
    (root / f".capture-intake/resolved/{intake_id}.json").unlink()
    _refused(root, run_in_shard(0x60, skip=1), "no exact resolved receipt")


def test_torn_entry_is_cut_off_and_the_resolution_finished(root):
    intake_id = _crash_after_append(root, run_in_shard(0x70), boundary="resolve.shard_torn")
    shard = root / f".capture-intake/ledger/{intake_id[:2]}.ledger"
    assert shard.stat().st_size == 64
    dirs = IntakeDirs(root)
    with intake_lock(dirs):
        _, report = recover(dirs, START)
    assert report.resolutions_finished == 1
    assert shard.stat().st_size == ENTRY_BYTES
    assert Ledger(dirs, create=False).lookup(intake_id) is not None


def test_garbage_past_the_mark_fails_closed(root):
    intake_id = resolve(root, run_in_shard(0x80))
    shard = root / f".capture-intake/ledger/{intake_id[:2]}.ledger"
    with open(shard, "ab") as handle:
        handle.write(b"not a ledger entry\n")
    _refused(root, run_in_shard(0x80, skip=1), "not a partial ledger entry")


def test_receipt_pruning_never_makes_an_old_run_admissible(root, monkeypatch):
    monkeypatch.setattr(state, "MAX_RECEIPTS", 8)
    monkeypatch.setattr(state, "PRUNE_TO", 5)
    ids = [resolve(root, f"run-{n}", f"Answer number {n}.", now=START + timedelta(minutes=n)) for n in range(12)]
    receipts = os.listdir(root / ".capture-intake/resolved")
    assert len(receipts) <= 8
    pruned = [i for i in ids if f"{i}.json" not in receipts]
    assert pruned == ids[: len(pruned)] and len(pruned) >= 4  # the oldest go first
    dirs = IntakeDirs(root)
    assert Ledger(dirs, create=False).report().entries == 12
    for index, intake_id in enumerate(ids):
        if intake_id not in pruned:
            continue
        again = admit(root, f"run-{index}", f"Answer number {index}.")
        assert (again.status, again.state) == ("duplicate", "resolved")
        other = admit(root, f"run-{index}", "A rewritten answer.")
        assert (other.status, other.reason) == ("failed", "conflict")
        view = inspect_run(dirs, intake_id, START)
        assert view["entries"] == [{"id": intake_id, "state": "resolved", "receipt": "pruned"}]


def test_a_prune_reads_only_the_receipts_it_has_not_read_and_leaves_an_edited_one(root, monkeypatch):
    """A prune checks every retained receipt (committed in the ledger, with the same payload):
    it read all 4,096 each time, a third of a busy intake worker's time. A receipt read by an
    earlier prune is known by its inode, size and times; one edited since is read again, and
    left for the operator when it no longer parses."""
    monkeypatch.setattr(state, "MAX_RECEIPTS", 8)
    monkeypatch.setattr(state, "PRUNE_TO", 6)
    monkeypatch.setattr(state, "_read_receipts", {})
    real_read, real_prune, read, pruning = state.read_receipt, state.prune_receipts, [], []

    def counted_read(dirs, intake_id):
        if pruning:
            read.append(intake_id)
        return real_read(dirs, intake_id)

    def flagged_prune(*args, **kwargs):
        pruning.append(True)
        try:
            return real_prune(*args, **kwargs)
        finally:
            pruning.pop()

    monkeypatch.setattr(state, "read_receipt", counted_read)
    monkeypatch.setattr(state, "prune_receipts", flagged_prune)
    monkeypatch.setattr(resolve_together, "prune_receipts", flagged_prune)
    ids = [resolve(root, f"run-{n}", f"Answer number {n}.", now=START + timedelta(minutes=n)) for n in range(8)]
    assert read == []  # eight fit: nothing was read
    (root / f".capture-intake/resolved/{ids[0]}.json").write_text("{damaged by hand")
    ids.append(resolve(root, "run-8", "Answer number 8.", now=START + timedelta(minutes=8)))
    assert sorted(read) == sorted(ids[:8])  # the first prune reads each retained receipt once
    read.clear()
    assert f"{ids[4]}.json" in os.listdir(root / ".capture-intake/resolved")  # read, and kept
    (root / f".capture-intake/resolved/{ids[4]}.json").write_text("{damaged after it was read")
    ids += [resolve(root, f"run-{n}", f"Answer number {n}.", now=START + timedelta(minutes=n)) for n in (9, 10, 11)]
    assert {ids[0], ids[4]} <= set(read) and len(read) <= 2 + 3  # the damaged ones and the new ones
    receipts = os.listdir(root / ".capture-intake/resolved")
    assert {f"{ids[0]}.json", f"{ids[4]}.json"} <= set(receipts) and len(receipts) <= 8  # the oldest, damaged: left


def test_spec_bounds():
    assert (state.MAX_ACTIVE, state.MAX_RECEIPTS, ENTRY_BYTES) == (4096, 4096, 129)
    assert CATALOG_BYTES == 27 + 256 * 85 + 65


def test_the_catalog_just_committed_is_loaded_without_parsing_it_again(root, monkeypatch):
    """The intake worker commits the catalog on every batch and loads it on the next: loading
    the very bytes it wrote re-checks nothing (it used to cost ~3% of a busy owner's time).
    Bytes edited on disk are still parsed and refused (test_edited_catalog_fails_its_seal)."""
    from memvault.vault.intake import catalog

    resolve(root, "run-a")
    parsed = []
    real_fullmatch = catalog._SLOTS_RE.fullmatch
    monkeypatch.setattr(
        catalog,
        "_SLOTS_RE",
        type("Spy", (), {"fullmatch": staticmethod(lambda *args: parsed.append(1) or real_fullmatch(*args))}),
    )
    dirs = IntakeDirs(root)
    loaded = catalog.load_catalog(dirs, ENTRY_BYTES, create=False)
    assert parsed == [] and sum(slot.size for slot in loaded.slots) == ENTRY_BYTES
    data = bytearray(dirs.catalog.read_bytes())
    data[-2] = ord("0") if data[-2] != ord("0") else ord("1")  # the seal's last digit
    dirs.catalog.write_bytes(bytes(data))
    with pytest.raises(LedgerIntegrityError, match="seal"):
        catalog.load_catalog(dirs, ENTRY_BYTES, create=False)
