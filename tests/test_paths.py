"""Vault-relative path safety: escapes, symlinked components, naming, ignored editor files."""

from __future__ import annotations

from pathlib import Path

import pytest

from memvault.vault.errors import UnsafePath
from memvault.vault.paths import is_ignored_name, resolve_inside, vault_relative


@pytest.fixture
def root(tmp_path: Path) -> Path:
    vault = tmp_path / "vault"
    (vault / "daily").mkdir(parents=True)
    return vault


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("daily/2026-11-30.md", "daily/2026-11-30.md"),
        ("daily/./x.md", "daily/x.md"),
        ("daily//x.md", "daily/x.md"),
        ("daily/../index.md", "index.md"),
        ("new/deeper/file.md", "new/deeper/file.md"),
        (Path("daily") / "y.md", "daily/y.md"),
    ],
)
def test_resolve_inside_normalises(root: Path, relative, expected: str) -> None:
    assert resolve_inside(root, relative) == root / expected


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "..", "daily/../../vault/x", "/etc/passwd", "/"])
def test_resolve_inside_refuses_escapes(root: Path, relative: str) -> None:
    with pytest.raises(UnsafePath):
        resolve_inside(root, relative)


def test_resolve_inside_refuses_nul(root: Path) -> None:
    with pytest.raises(UnsafePath, match="NUL"):
        resolve_inside(root, "daily/a\x00.md")


def test_resolve_inside_refuses_symlinked_intermediate_dir(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "notes").symlink_to(outside)
    with pytest.raises(UnsafePath) as info:
        resolve_inside(root, "notes/x.md")
    assert str(root / "notes") in str(info.value)


def test_resolve_inside_refuses_symlinked_target(root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    (root / "daily" / "x.md").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePath, match="symlink"):
        resolve_inside(root, "daily/x.md")


def test_resolve_inside_refuses_link_even_when_pointing_inside(root: Path) -> None:
    (root / "alias").symlink_to(root / "daily")
    with pytest.raises(UnsafePath):
        resolve_inside(root, "alias/x.md")


def test_resolve_inside_allows_symlinked_root(root: Path, tmp_path: Path) -> None:
    link_root = tmp_path / "vault-link"
    link_root.symlink_to(root)
    assert resolve_inside(link_root, "daily/x.md") == link_root / "daily" / "x.md"


def test_vault_relative(root: Path) -> None:
    assert vault_relative(root, root / "daily" / "x.md") == "daily/x.md"
    assert vault_relative(root, root / "daily" / ".." / "index.md") == "index.md"


def test_vault_relative_through_symlinked_root(root: Path, tmp_path: Path) -> None:
    link_root = tmp_path / "vault-link"
    link_root.symlink_to(root)
    assert vault_relative(link_root, root / "daily" / "x.md") == "daily/x.md"


@pytest.mark.parametrize("outside", ["../elsewhere/x.md", "/etc/passwd"])
def test_vault_relative_refuses_outside(root: Path, outside: str) -> None:
    with pytest.raises(UnsafePath, match="outside the vault"):
        vault_relative(root, root / outside)


@pytest.mark.parametrize(
    "name",
    [
        ".hidden",
        ".index",
        "note.md~",
        ".note.md.swp",
        "note.md.swp",
        "note.md.swx",
        "note.md.swo",
        ".note.md.abc123.tmp",
        "x.tmp",
        "#note.md#",
        ".#note.md",
        "4913",
        "note.md.bak",
        "note.md.orig",
        "note.md.crswap",
        ".~lock.note.md#",
    ],
)
def test_is_ignored_name_true(name: str) -> None:
    assert is_ignored_name(name)


@pytest.mark.parametrize("name", ["2026-11-30.md", "index.md", "graph.jsonl", "#tag-note.md", "49130.md", "daily"])
def test_is_ignored_name_false(name: str) -> None:
    assert not is_ignored_name(name)
