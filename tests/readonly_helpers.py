"""Real read-only vaults and real full disks for tests: bind mounts and small tmpfs mounts.

`read_only_view(source)` yields a path where the vault cannot be written: a bind mount of it
remounted read-only when this process may mount (root), else (a non-root user) a copy whose
files and folders have no write bits, else the test is skipped with the reason. `small_tmpfs`
yields a mounted tmpfs of a given size (root only). Both unmount in every case.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

MEMVAULT = str(Path(sys.executable).parent / "memvault")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


def _unmount(path: Path) -> None:
    for _ in range(3):
        if _run("umount", str(path)).returncode == 0 or not os.path.ismount(path):
            return
        _run("umount", "-l", str(path))


@contextmanager
def read_only_view(source: Path, mountpoint: Path):
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and shutil.which("mount"):
        bound = _run("mount", "--bind", str(source), str(mountpoint))
        if bound.returncode == 0:
            try:
                remount = _run("mount", "-o", "remount,ro,bind", str(mountpoint))
                if remount.returncode != 0:
                    pytest.skip(f"cannot remount a bind mount read-only here: {remount.stderr.strip()}")
                yield mountpoint
            finally:
                _unmount(mountpoint)
            return
        pytest.skip(
            f"running as root but `mount --bind` failed ({bound.stderr.strip()}); root ignores file modes, "
            "so a read-only copy would not be read-only either"
        )
    if os.geteuid() == 0:
        pytest.skip("root without a `mount` binary: root ignores file modes, so no read-only vault can be made")
    copy = mountpoint / "vault"
    shutil.copytree(source, copy, symlinks=True)
    for folder, _dirs, files in os.walk(copy, topdown=False):
        for name in files:
            os.chmod(Path(folder) / name, 0o444)
        os.chmod(folder, 0o555)
    try:
        yield copy
    finally:
        for folder, _dirs, _files in os.walk(copy):
            os.chmod(folder, 0o755)


@contextmanager
def small_tmpfs(mountpoint: Path, size: str):
    if os.geteuid() != 0:
        pytest.skip("a full-disk test needs its own small tmpfs, and mounting one needs root")
    mountpoint.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mountpoint))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        _unmount(mountpoint)


def fill_disk(folder: Path) -> None:
    """Write one file until the file system refuses (ENOSPC), leaving it full."""
    with open(folder / "ballast", "wb") as ballast:
        chunk = b"\0" * 65536
        try:
            while True:
                ballast.write(chunk)
                ballast.flush()
        except OSError:
            pass
    # smaller writes fill the last partial block too
    with open(folder / "ballast2", "wb", buffering=0) as rest:
        try:
            while True:
                rest.write(b"\0" * 512)
        except OSError:
            pass


def tree_state(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every file and folder under `root`: kind, mode and (files) content hash. Lock files are
    content-free and left in place by design; `skip` names top-level entries to ignore."""
    state = {}
    for folder, _dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        if rel_folder.split(os.sep)[0] in skip:
            continue
        state[rel_folder] = ("dir", stat.S_IMODE(os.lstat(folder).st_mode))
        for name in files:
            path = Path(folder) / name
            rel = os.path.relpath(path, root)
            if rel.split(os.sep)[0] in skip:
                continue
            state[rel] = ("file", stat.S_IMODE(os.lstat(path).st_mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def memvault(
    vault: Path, *args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """One real `memvault --vault VAULT ...` process."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MEMVAULT_")}
    environment.update(env or {})
    return subprocess.run(
        [MEMVAULT, "--vault", str(vault), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=str(vault.parent),
    )


def memvault_here(vault: Path, *args: str, input: str | None = None) -> int:
    """`memvault --vault VAULT ...` run in this process (click's test runner): for the set-up steps
    of a test about other commands, which need no process of their own. `input`: its stdin. Its exit code."""
    return memvault_here_result(vault, *args, input=input).exit_code


def memvault_here_result(vault: Path, *args: str, input: str | None = None):
    """`memvault_here`'s whole click result (`.exit_code`, `.stdout`): for a check a test makes
    between the processes it is about (a health report after a kill), not for the command under test."""
    from click.testing import CliRunner

    from memvault.cli.main import cli

    done = CliRunner().invoke(cli, ["--vault", str(vault), *args], input=input)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise done.exception
    return done
