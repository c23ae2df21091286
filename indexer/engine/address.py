"""Where a vault's owner listens, and the status file that names it. Standard library only.

The socket lives outside the vault, where `git clean -fdx` and `rm -rf .locks` do not reach it,
so a second would-be owner always finds the first by probing it:

    /run/user/<uid>/memvault/<hash>.sock   when that runtime folder exists and is ours
    /tmp/memvault-<uid>/<hash>.sock        otherwise (created 0700, refused if not ours)

`<hash>` is the first 24 hex digits of SHA-256 of the vault's real path, so every process that
opens the vault by any spelling (symlinks, relative paths) reaches the same socket, and the path
stays far below the kernel's 108-byte limit. The path is derived from the vault alone (not from
the environment), so two processes with different environments can never disagree on it.

A resident connection (`memvault --remote NAME serve`: a connected store kept open on a machine
without the vault's files, indexer/engine/resident.py) listens in the same folder, under the same
rules, as `remote-<hash>.sock`, with its status file `remote-<hash>.json`, its lock file
`remote-<hash>.lock` and (one started on demand) its log `remote-<hash>.log` beside it. Its
`<hash>` covers the vault's name and everything the connection depends on (every `PG*` and
`MEMVAULT_INDEX_*` variable, `HOME`, `XDG_STATE_HOME`), so a command run with another DSN, role or
server never reaches a resident connected otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from memvault.vault.errors import UnsafePath

#: the kernel's sun_path limit (108 bytes, including the terminating NUL)
MAX_SOCKET_PATH_BYTES = 107
STATUS_FILE = "engine.json"


def socket_dir() -> Path:
    uid = os.getuid()
    runtime = Path(f"/run/user/{uid}")
    try:
        info = os.lstat(runtime)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid and os.access(runtime, os.W_OK):
            return runtime / "memvault"
    except OSError:
        pass
    return Path(f"/tmp/memvault-{uid}")


def socket_path(vault_root: Path) -> Path:
    digest = hashlib.sha256(os.fsencode(os.path.realpath(vault_root))).hexdigest()[:24]
    path = socket_dir() / f"{digest}.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise UnsafePath(f"the engine socket path {path} is longer than the kernel's 108-byte limit")
    return path


def ensure_socket_dir() -> Path:
    """The socket folder, created 0700; refused when it is a symlink or another user's."""
    folder = socket_dir()
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise UnsafePath(f"{folder} is not a folder owned by this user: remove it so memvault can create its own")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(folder, 0o700)
    return folder


#: what a connected store's connection and files depend on: every libpq variable, every index
#: server setting (its DSNs, bounds, pooler), and the folders of libpq's and the journal's files
RESIDENT_ENV_PREFIXES = ("PG", "MEMVAULT_INDEX_")
RESIDENT_ENV = ("HOME", "XDG_STATE_HOME")


class ResidentPaths:
    """Where the resident connection of one vault name and connection settings listens."""

    __slots__ = ("socket", "status", "lock", "log")

    def __init__(self, base: Path):
        self.socket = base.with_name(base.name + ".sock")
        self.status = base.with_name(base.name + ".json")
        self.lock = base.with_name(base.name + ".lock")
        self.log = base.with_name(base.name + ".log")  # a resident started on demand writes here


def resident_paths(name: str, env) -> ResidentPaths:
    """The resident connection's socket, status and lock files for vault `name` reached with `env`."""
    settings = sorted((k, v) for k, v in env.items() if k.startswith(RESIDENT_ENV_PREFIXES) or k in RESIDENT_ENV)
    identity = json.dumps([name, settings], ensure_ascii=False).encode("utf-8", "surrogatepass")
    paths = ResidentPaths(socket_dir() / f"remote-{hashlib.sha256(identity).hexdigest()[:24]}")
    if len(os.fsencode(paths.socket)) > MAX_SOCKET_PATH_BYTES:
        raise UnsafePath(f"the resident connection's socket {paths.socket} is longer than the kernel's 108-byte limit")
    return paths


def private_socket_dir() -> bool:
    """Whether the socket folder is this user's own and closed to others (a client's check before it
    sends a question to whatever listens there: /tmp is everyone's)."""
    try:
        info = os.lstat(socket_dir())
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not stat.S_IMODE(info.st_mode) & 0o077


def status_path(vault_root: Path) -> Path:
    return Path(vault_root) / ".locks" / STATUS_FILE


def read_status(vault_root: Path) -> dict | None:
    """The owner's status file (pid, start time, socket, protocol, fence inode); advisory only."""
    try:
        with open(status_path(vault_root), "rb") as handle:
            data = json.loads(handle.read(64 * 1024))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
