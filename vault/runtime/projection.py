"""`runtime/USER.md` and `runtime/MEMORY.md`: deterministic projections people may read and edit.

Each projection starts with one comment line that names its target, the state revision that
wrote it, and a digest of the rest of the file:

    <!-- memvault:runtime target=USER revision=7 body-sha256=0123456789abcdef ... -->
    # User profile

    - Prefers metric units.

That line lets a loader tell three cases apart without guessing (see `classify`):
- the bytes memvault committed (their SHA-256 is in memories.json): current;
- bytes memvault wrote for the *next* revision that never committed (a crash between the
  projection renames and the memories.json rename): stale, regenerated from memories.json;
- anything else (the digest no longer matches, the line is gone, or an older file was restored
  from git): a person's edit, adopted on the next write or refused with a message.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from memvault.vault.errors import CredentialRefused, InvalidRecord
from memvault.vault.runtime.entries import MEMORY, USER, RuntimeEntry, normalize_entry, packed_bytes

FILES = {USER: "runtime/USER.md", MEMORY: "runtime/MEMORY.md"}
TITLES = {USER: "User profile", MEMORY: "Working memory"}
CURRENT, MISSING, STALE, EDITED = "current", "missing", "stale", "edited"
_HEADER_RE = re.compile(
    r"<!-- memvault:runtime target=(?P<target>USER|MEMORY) revision=(?P<revision>\d{1,15})"
    r" body-sha256=(?P<digest>[0-9a-f]{16}) [^\n]*-->\n"
)
_HEADER_NOTE = "generated from runtime/memories.json; hand edits are adopted on the next write"
_ENTRY_RE = re.compile(r"[-*+][ \t]+(?P<text>.*)")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def render_projection(target: str, entries: list[RuntimeEntry], revision: int) -> bytes:
    body = f"# {TITLES[target]}\n\n" + "".join(f"- {entry.content}\n" for entry in entries)
    digest = sha256_hex(body.encode("utf-8"))[:16]
    header = f"<!-- memvault:runtime target={target} revision={revision} body-sha256={digest} {_HEADER_NOTE} -->\n"
    return (header + body).encode("utf-8")


@dataclass(frozen=True)
class Header:
    target: str
    revision: int
    intact: bool  # the body still has the digest memvault wrote


def read_header(raw: bytes) -> Header | None:
    match = _HEADER_RE.match(raw.decode("utf-8", "replace"))
    if match is None:
        return None
    body = raw[len(match.group(0).encode("utf-8")) :]
    intact = sha256_hex(body)[:16] == match["digest"]
    return Header(match["target"], int(match["revision"]), intact)


def classify(raw: bytes | None, target: str, committed_sha: str | None, state_revision: int) -> str:
    """CURRENT, MISSING, STALE (memvault's own uncommitted next revision) or EDITED."""
    if raw is None:
        return MISSING
    if committed_sha is not None and sha256_hex(raw) == committed_sha:
        return CURRENT
    header = read_header(raw)
    if header is not None and header.intact and header.target == target and header.revision == state_revision + 1:
        return STALE
    return EDITED


def parse_edited(raw: bytes, target: str, limit: int) -> list[str]:
    """The entries of a hand-edited projection, or InvalidRecord naming the line and the fix.

    Accepted: `- `, `* ` or `+ ` entry lines, blank lines, headings and one-line HTML comments.
    Anything else (a wrapped paragraph, a nested list) has no safe meaning as an entry, so the
    edit is refused rather than guessed at.
    """
    name = FILES[target]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refusal(target, f"it is not UTF-8 (byte {exc.start})") from None
    contents: list[str] = []
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):  # editors may add a BOM
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or (stripped.startswith("<!--") and stripped.endswith("-->")):
            continue
        match = _ENTRY_RE.fullmatch(line.rstrip())
        if match is None:
            raise refusal(target, f"line {number} is not a '- ' entry line ({_excerpt(line)})")
        try:
            contents.append(normalize_entry(match["text"], f"line {number}"))
        except InvalidRecord as exc:
            raise refusal(target, str(exc)) from None
        except CredentialRefused as exc:
            raise CredentialRefused(f"{name} was edited by hand and memvault will not adopt it: {exc}") from None
    used = packed_bytes(contents)
    if used > limit:
        raise refusal(target, f"its entries take {used} bytes, over the {limit}-byte {target} limit")
    return contents


def _excerpt(line: str) -> str:
    return repr(line[:60] + ("..." if len(line) > 60 else ""))


def refusal(target: str, problem: str) -> InvalidRecord:
    name = FILES[target]
    return InvalidRecord(
        f"{name} was edited by hand and memvault cannot adopt the edit: {problem}. Nothing was changed."
        f" Fix: edit {name} so every entry is one '- ' line within the limit, or delete {name}"
        " to restore it from runtime/memories.json"
    )
