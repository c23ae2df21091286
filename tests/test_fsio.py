"""Durable write primitives against real files: failure injection, symlinks, modes, ownership."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from memvault.vault import fsio
from memvault.vault.errors import UnsafePath
from memvault.vault.fsio import (
    append_durable,
    atomic_write,
    check_private_file,
    ensure_private_dir,
    fsync_dir,
    read_bytes_nofollow,
    read_small,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask():
    """Set a umask for one test and restore the old one."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda value: os.umask(value)
    os.umask(saved)


@pytest.fixture
def note(tmp_path: Path) -> Path:
    path = tmp_path / "note.md"
    path.write_bytes(b"old bytes\n")
    return path


# --- atomic_write -----------------------------------------------------------------------------


def test_atomic_write_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(os.listdir(tmp_path)) == ["a.md"]


def test_atomic_write_replaces_inode_so_readers_keep_old_bytes(note: Path) -> None:
    with open(note, "rb") as reader:
        atomic_write(note, b"new bytes\n")
        assert reader.read() == b"old bytes\n"
    assert note.read_bytes() == b"new bytes\n"


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o640])
def test_atomic_write_mode_is_exact_whatever_the_umask(tmp_path: Path, umask, mode: int) -> None:
    umask(0o077)
    path = tmp_path / "f"
    atomic_write(path, b"x", mode=mode)
    assert _mode(path) == mode
    umask(0o000)
    atomic_write(path, b"y", mode=mode)
    assert _mode(path) == mode


def test_atomic_write_os_replace_failure_keeps_old_bytes_and_no_temp(note: Path, monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise OSError(errno.EIO, "injected replace failure")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="injected replace failure"):
        atomic_write(note, b"new bytes\n")
    monkeypatch.undo()
    assert note.read_bytes() == b"old bytes\n"
    assert os.listdir(note.parent) == ["note.md"]


def test_atomic_write_fsync_failure_keeps_old_bytes_and_no_temp(note: Path, monkeypatch) -> None:
    def boom(fd):
        raise OSError(errno.EIO, "injected fsync failure")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="injected fsync failure"):
        atomic_write(note, b"new bytes\n")
    monkeypatch.undo()
    assert note.read_bytes() == b"old bytes\n"
    assert os.listdir(note.parent) == ["note.md"]


def test_atomic_write_failure_mid_write_keeps_old_bytes_and_no_temp(note: Path, monkeypatch) -> None:
    real_write = os.write
    calls = []

    def short_then_enospc(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "injected disk full")

    monkeypatch.setattr(os, "write", short_then_enospc)
    with pytest.raises(OSError, match="injected disk full"):
        atomic_write(note, b"new bytes that will not fit\n")
    monkeypatch.undo()
    assert len(calls) == 2  # the short write was retried, not taken as done
    assert note.read_bytes() == b"old bytes\n"
    assert os.listdir(note.parent) == ["note.md"]


def test_atomic_write_short_writes_are_completed(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    data = b"0123456789" * 10
    atomic_write(tmp_path / "f", data)
    monkeypatch.undo()
    assert (tmp_path / "f").read_bytes() == data


def test_atomic_write_refuses_symlink_and_leaves_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"target bytes")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    with pytest.raises(UnsafePath, match="symlink"):
        atomic_write(link, b"new")
    assert target.read_bytes() == b"target bytes"
    assert sorted(os.listdir(tmp_path)) == ["link.md", "target"]


# --- append_durable ---------------------------------------------------------------------------


def test_append_durable_returns_start_offsets(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    assert append_durable(path, b"abc") == 0
    assert append_durable(path, b"defg") == 3
    assert append_durable(path, b"") == 7
    assert path.read_bytes() == b"abcdefg"


def test_append_durable_creation_mode_is_exact_and_existing_mode_kept(tmp_path: Path, umask) -> None:
    umask(0o077)
    path = tmp_path / "shard"
    append_durable(path, b"x", mode=0o640)
    assert _mode(path) == 0o640
    os.chmod(path, 0o600)
    append_durable(path, b"y", mode=0o644)
    assert _mode(path) == 0o600


def test_append_durable_completes_short_writes(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:2])))
    path = tmp_path / "ledger"
    path.write_bytes(b"head")
    start = append_durable(path, b"0123456789")
    monkeypatch.undo()
    assert start == 4
    assert path.read_bytes() == b"head0123456789"


def test_append_durable_fsyncs_parent_only_when_created(tmp_path: Path, monkeypatch) -> None:
    synced: list[Path] = []
    real = fsio.fsync_dir
    monkeypatch.setattr(fsio, "fsync_dir", lambda p: (synced.append(Path(p)), real(p)))
    path = tmp_path / "ledger"
    append_durable(path, b"a")
    append_durable(path, b"b")
    assert synced == [tmp_path]


def test_append_durable_refuses_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"t")
    link = tmp_path / "ledger"
    link.symlink_to(target)
    with pytest.raises(UnsafePath, match="symlink"):
        append_durable(link, b"x")
    assert target.read_bytes() == b"t"


def test_append_durable_refuses_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "ledger"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafePath, match="symlink"):
        append_durable(link, b"x")
    assert not (tmp_path / "nowhere").exists()


def test_append_durable_refuses_fifo_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "ledger"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePath, match="not a regular file"):
        append_durable(fifo, b"x")


# --- read_bytes_nofollow / fsync_dir ----------------------------------------------------------


def test_read_bytes_nofollow_reads(note: Path) -> None:
    assert read_bytes_nofollow(note) == b"old bytes\n"


@pytest.mark.parametrize("size", [0, 1, 4095, 65536, (1 << 20) + 5, 3 * (1 << 20) + 7])
def test_read_bytes_nofollow_and_read_small_read_every_byte(tmp_path: Path, size: int) -> None:
    path = tmp_path / "file"
    data = os.urandom(size)
    path.write_bytes(data)
    assert read_bytes_nofollow(path) == data and read_small(path) == data


def test_read_bytes_nofollow_reads_on_past_the_size_it_stated(tmp_path: Path, monkeypatch) -> None:
    """A file that grew between the stat and the read is read to its end, not to the stated size."""
    path = tmp_path / "growing"
    data = os.urandom(300_000)
    path.write_bytes(data)
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: os.stat_result((*real_fstat(fd)[:6], 10, *real_fstat(fd)[7:])))
    assert read_bytes_nofollow(path) == data


def test_read_bytes_nofollow_of_a_folder_is_is_a_directory_error(tmp_path: Path) -> None:
    """Callers name a folder where a note goes (`NoteNotWritable`, admit, health) from this error."""
    with pytest.raises(IsADirectoryError):
        read_bytes_nofollow(tmp_path)


def test_read_bytes_nofollow_missing_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bytes_nofollow(tmp_path / "absent")


def test_read_bytes_nofollow_refuses_symlink_naming_path_and_fix(note: Path) -> None:
    link = note.parent / "link.md"
    link.symlink_to(note)
    with pytest.raises(UnsafePath) as info:
        read_bytes_nofollow(link)
    assert str(link) in str(info.value)
    assert "Fix:" in str(info.value)


def test_read_bytes_nofollow_refuses_fifo_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_bytes_nofollow(fifo)


def test_fsync_dir_accepts_dir_and_refuses_symlink(tmp_path: Path) -> None:
    fsync_dir(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePath, match="symlink"):
        fsync_dir(tmp_path / "link")


# --- ensure_private_dir -----------------------------------------------------------------------


def test_ensure_private_dir_creates_0700_whatever_the_umask(tmp_path: Path, umask) -> None:
    umask(0o000)
    path = tmp_path / "a" / "b" / ".capture-intake"
    assert ensure_private_dir(path) == path
    assert _mode(path) == 0o700
    umask(0o777)
    other = tmp_path / "c"
    ensure_private_dir(other)
    assert _mode(other) == 0o700


def test_ensure_private_dir_tightens_our_own_broad_dir(tmp_path: Path) -> None:
    path = tmp_path / "d"
    path.mkdir()
    os.chmod(path, 0o755)
    ensure_private_dir(path)
    assert _mode(path) == 0o700


def test_ensure_private_dir_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "d"
    ensure_private_dir(path)
    (path / "kept").write_bytes(b"k")
    ensure_private_dir(path)
    assert (path / "kept").read_bytes() == b"k"


def test_ensure_private_dir_refuses_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    os.chmod(real, 0o755)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafePath, match="symlink"):
        ensure_private_dir(link)
    assert _mode(real) == 0o755


def test_ensure_private_dir_refuses_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    with pytest.raises(UnsafePath, match="not a folder"):
        ensure_private_dir(path)


@needs_root
def test_ensure_private_dir_refuses_foreign_owner(tmp_path: Path) -> None:
    path = tmp_path / "theirs"
    path.mkdir()
    os.chmod(path, 0o755)
    os.chown(path, 54321, 54321)
    with pytest.raises(UnsafePath) as info:
        ensure_private_dir(path)
    message = str(info.value)
    assert "uid 54321" in message and "Fix:" in message
    assert _mode(path) == 0o755  # not adopted, not chmodded


# --- check_private_file -----------------------------------------------------------------------


@pytest.fixture
def private(tmp_path: Path) -> Path:
    path = tmp_path / "record"
    atomic_write(path, b"r", mode=0o600)
    return path


def test_check_private_file_accepts_owner_only_single_link(private: Path) -> None:
    check_private_file(private)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_check_private_file_refuses_group_other_bits_with_chmod_fix(private: Path, mode: int) -> None:
    os.chmod(private, mode)
    with pytest.raises(UnsafePath) as info:
        check_private_file(private)
    assert f"chmod 600 {private}" in str(info.value)


def test_check_private_file_refuses_symlink(private: Path) -> None:
    link = private.parent / "link"
    link.symlink_to(private)
    with pytest.raises(UnsafePath, match="symlink"):
        check_private_file(link)


def test_check_private_file_refuses_hard_link(private: Path) -> None:
    os.link(private, private.parent / "alias")
    with pytest.raises(UnsafePath, match="2 hard links"):
        check_private_file(private)


def test_check_private_file_refuses_non_regular(tmp_path: Path) -> None:
    path = tmp_path / "dir"
    path.mkdir(mode=0o700)
    with pytest.raises(UnsafePath, match="not a regular file"):
        check_private_file(path)


@needs_root
def test_check_private_file_refuses_foreign_owner(private: Path) -> None:
    os.chown(private, 54321, 54321)
    with pytest.raises(UnsafePath, match="uid 54321"):
        check_private_file(private)


def _replaced_after_each_open(monkeypatch, target: Path, times: int) -> list[bytes]:
    """`open_private`'s opens, each followed by a writer's `atomic_write` of the same name: the
    interleaving a reader meets when the owner commits the intake catalog as a client reads it."""
    opened = fsio._open_nofollow
    written: list[bytes] = []

    def open_then_replace(path, flags, mode=0o600):
        fd = opened(path, flags, mode)
        if Path(path) == target and len(written) < times:
            written.append(b"version %d" % len(written))
            atomic_write(Path(path), written[-1], mode=0o600)
        return fd

    monkeypatch.setattr(fsio, "_open_nofollow", open_then_replace)
    return written


def test_open_private_of_a_file_replaced_after_its_open_opens_the_new_file(private: Path, monkeypatch) -> None:
    """Found in CI: `memvault admit` refused the catalog for having "0 hard links" when the owner
    replaced it between the client's open and its look at the descriptor."""
    written = _replaced_after_each_open(monkeypatch, private, times=2)
    fd = fsio.open_private(private)
    with os.fdopen(fd, "rb") as handle:
        assert handle.read() == written[-1] == b"version 1"


def test_open_private_of_a_file_replaced_on_every_open_gives_up_naming_it(private: Path, monkeypatch) -> None:
    _replaced_after_each_open(monkeypatch, private, times=10_000)
    with pytest.raises(UnsafePath, match=f"{private} was replaced .* times while memvault opened it"):
        fsio.open_private(private)


def test_open_private_still_refuses_a_second_link(private: Path) -> None:
    os.link(private, private.parent / "alias")
    with pytest.raises(UnsafePath, match="2 hard links"):
        fsio.open_private(private)
