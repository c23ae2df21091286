"""The owner channel's wire format: one JSON object per line each way, with a protocol version.

    request   {"v": 1, "op": "recall", "args": {...}}
    response  {"v": 1, "ok": true, "result": {...}}
           or {"v": 1, "ok": false, "error": {"type": "CredentialRefused", "code": "...", "message": "..."}}
    news      {"v": 1, "op": "admitted", "args": {...}, "answer": false}   carried out, never answered

News (a client telling the owner something it acts on by itself) goes on a kept connection only
to an owner whose hello says `"unanswered": true`; an older owner would answer it, and that
answer would be read as the next call's.

Standard library only: thin clients import this before anything heavy. Errors travel as their
class name and code, so a client raises the same `VaultError` subclass the owner raised and
the CLI prints the same message as in-process.
"""

from __future__ import annotations

import json

from memvault.vault import errors as vault_errors
from memvault.vault.errors import VaultError

PROTOCOL_VERSION = 1
#: one message (request or response) at most this long; a journal page or recall stays far below
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class ProtocolError(VaultError):
    """The other end spoke something that is not this protocol (or another version of it)."""

    code = "engine_protocol"


class EngineStuck(VaultError):
    """An owner holds the vault but does not answer: clients refuse rather than write beside it."""

    code = "engine_stuck"


class EngineRunning(vault_errors.VaultLocked):
    """A second owner was asked for while one runs."""

    code = "vault_locked"


def encode(message: dict) -> bytes:
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8") + b"\n"
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"an engine message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    return data


def decode(line: bytes) -> dict:
    """Parse one line; a wrong version or a non-object is refused by name."""
    if len(line) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"an engine message exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"the engine channel carried something that is not JSON ({exc})") from None
    if not isinstance(message, dict):
        raise ProtocolError("an engine message must be one JSON object")
    version = message.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"the engine speaks protocol {version!r} and this memvault speaks {PROTOCOL_VERSION}: "
            "restart the engine with this version (`memvault engine stop`, then start it again)"
        )
    return message


def request(op: str, args: dict | None = None) -> dict:
    return {"v": PROTOCOL_VERSION, "op": op, "args": args or {}}


def news(op: str, args: dict | None = None) -> dict:
    """A request the owner carries out without answering (see the module docstring)."""
    return request(op, args) | {"answer": False}


def is_news(message: dict) -> bool:
    return message.get("answer") is False


def success(result: object) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": True, "result": result}


def failure(exc: BaseException) -> dict:
    """An error as it travels: typed for a VaultError, generic (no internals) for anything else."""
    if isinstance(exc, VaultError):
        error = {"type": type(exc).__name__, "code": exc.code, "message": str(exc)}
    else:
        error = {
            "type": "InternalError",
            "code": "internal_error",
            "message": f"the engine failed unexpectedly ({type(exc).__name__}); see the owner's log",
        }
    return {"v": PROTOCOL_VERSION, "ok": False, "error": error}


def raise_error(error: object) -> None:
    """Raise what the owner raised (see `error_from_wire`)."""
    raise error_from_wire(error)


def error_from_wire(error: object) -> VaultError:
    """The same class when it is one of vault.errors', else a VaultError carrying the owner's
    code (JournalUnavailable, TurnJsonError…) and message."""
    if not isinstance(error, dict):
        return ProtocolError("the engine answered an error without a description")
    name, code, message = str(error.get("type")), str(error.get("code")), str(error.get("message"))
    known = {cls.__name__: cls for cls in _error_classes()}
    if name in known:
        return known[name](message)
    exc = VaultError(message)
    exc.code = code
    return exc


def _error_classes() -> list[type[VaultError]]:
    classes = [EngineStuck, EngineRunning, ProtocolError]
    for value in vars(vault_errors).values():
        if isinstance(value, type) and issubclass(value, VaultError):
            classes.append(value)
    return classes
