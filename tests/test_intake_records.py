"""The intake record/receipt format, its strict parser, private-file checks and the backoff schedule."""

import json
import os
from datetime import timedelta

import pytest

from memvault.vault.errors import InvalidRecord, UnsafePath
from memvault.vault.intake import backoff
from memvault.vault.intake.files import MAX_RECORD_BYTES, read_private
from memvault.vault.intake.record import (
    IntakeRecord,
    Payload,
    Receipt,
    parse_receipt,
    parse_record,
    render_receipt,
    render_record,
)
from tests.intake_helpers import START

ID = "ab" * 32


def record(**changes) -> IntakeRecord:
    base = IntakeRecord(ID, Payload("append-host-summary", "user", "Shipped v2.", None), "lite", START, START)
    return base if not changes else base.evolve(**changes)


def test_record_round_trips_through_canonical_bytes():
    rec = record(attempts=3, failure="note_conflict", next_attempt_at=START + timedelta(minutes=4))
    data = render_record(rec)
    assert data.endswith(b"\n") and b" " not in data.replace(b"Shipped v2.", b"")
    assert parse_record(data, ID, "r") == rec
    receipt = Receipt(ID, rec.payload_sha256, "projected", START, START, 1, "daily/2026-11-30.md#^t-abababab12", None)
    assert parse_receipt(render_receipt(receipt), ID, "r") == receipt


def test_payload_identity_ignores_state_but_not_content():
    assert record().payload_sha256 == record(attempts=5).payload_sha256
    other = IntakeRecord(ID, Payload("append-host-summary", "user", "Shipped v3.", None), "lite", START, START)
    assert other.payload_sha256 != record().payload_sha256


def _edit(mutate) -> bytes:
    body = json.loads(render_record(record()))
    mutate(body)
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


HOSTILE = {
    "unknown field": lambda b: b.update(extra=1),
    "missing field": lambda b: b.pop("tier"),
    "attempts as text": lambda b: b.update(attempts="1"),
    "attempts as bool": lambda b: b.update(attempts=True),
    "attempts over 16": lambda b: b.update(attempts=17),
    "unknown state": lambda b: b.update(state="captured"),
    "unbounded failure": lambda b: b.update(failure="disk exploded: /home/x"),
    "bad timestamp": lambda b: b.update(admittedAt="2026-11-30 13:03"),
    "impossible timestamp": lambda b: b.update(admittedAt="2026-02-30T13:03:00.000000Z"),
    "payload edited": lambda b: b["payload"].update(summary="Shipped v9."),
    "payload extra key": lambda b: b["payload"].update(secret="x"),
    "wrong tier": lambda b: b.update(tier="cloud"),
    "bad projection": lambda b: b.update(projection="../../etc/passwd"),
    "future version": lambda b: b.update(v=2),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_records_fail_closed(name):
    with pytest.raises(InvalidRecord, match="Fix:"):
        parse_record(_edit(HOSTILE[name]), ID, "pending/x.json")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]\n",
        b"\xff\xfe",
        b'{"v":1,"v":1}\n',
        b'{"attempts":NaN}\n',
        render_record(record()).replace(b'"attempts":0', b'"attempts": 0'),  # not canonical
        render_record(record())[:-1],  # no final newline
        render_record(record()) + b"\n",
    ],
)
def test_malformed_bytes_fail_closed(data):
    with pytest.raises(InvalidRecord):
        parse_record(data, ID, "pending/x.json")


def test_record_under_another_name_is_refused():
    with pytest.raises(InvalidRecord, match="does not match its file name"):
        parse_record(render_record(record()), "cd" * 32, "pending/x.json")


def test_oversized_document_is_refused_before_parsing():
    huge = b'{"pad":"' + b"x" * MAX_RECORD_BYTES + b'"}\n'
    with pytest.raises(InvalidRecord, match="640|655360"):
        parse_record(huge, ID, "pending/x.json")


def test_read_private_refuses_links_owners_modes_and_size(tmp_path):
    good = tmp_path / "good.json"
    good.write_bytes(b"{}")
    good.chmod(0o600)
    assert read_private(good) == b"{}"
    link = tmp_path / "link.json"
    link.symlink_to(good)
    with pytest.raises(UnsafePath, match="symlink"):
        read_private(link)
    hard = tmp_path / "hard.json"
    os.link(good, hard)
    with pytest.raises(UnsafePath, match="hard links"):
        read_private(good)
    hard.unlink()
    good.chmod(0o644)
    with pytest.raises(UnsafePath, match="chmod 600"):
        read_private(good)
    good.chmod(0o600)
    if os.geteuid() == 0:
        os.chown(good, 4242, 4242)
        with pytest.raises(UnsafePath, match="owned by uid 4242"):
            read_private(good)
        os.chown(good, 0, 0)
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * (MAX_RECORD_BYTES + 1))
    big.chmod(0o600)
    with pytest.raises(InvalidRecord, match="at most 655360 bytes"):
        read_private(big)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(UnsafePath):
        read_private(fifo)


def test_backoff_schedule_matches_the_spec():
    waits = backoff.schedule()
    assert backoff.MAX_ATTEMPTS == 16 and len(waits) == 15
    assert waits[0] == timedelta(minutes=1) and waits[1] == timedelta(minutes=2)
    assert max(waits) == timedelta(hours=6) and waits[-1] == timedelta(hours=6)
    assert all(b >= a for a, b in zip(waits, waits[1:], strict=False))
    assert waits[:9] == [timedelta(minutes=2**n) for n in range(9)]
    assert sum(waits, timedelta()) > timedelta(hours=24)
    assert sum(waits, timedelta()) == timedelta(minutes=2671)
    assert backoff.is_exhausted(16) and not backoff.is_exhausted(15)
    with pytest.raises(ValueError):
        backoff.delay_after(0)
