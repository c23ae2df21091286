"""Memory identity: normalised content hashes and the ids written as Obsidian block ids.

A remembered fact's id derives from its content, so remembering the same text twice converges
on one bullet. A bullet a person wrote without an id gets a *derived* id from its text and its
occurrence in the file; memvault never writes that id back into the person's line.
"""

import hashlib
import re
import unicodedata

#: explicit ids written by memvault: `^m-` + 10 hex digits of the content hash
MEMORY_ID_PREFIX = "m-"
#: ids computed for hand-written bullets; never written to disk
DERIVED_ID_PREFIX = "d-"
ID_HEX_LENGTH = 10

#: what Obsidian accepts as a block id: letters, digits and dashes
BLOCK_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9-]{0,63}"
_BLOCK_ID_RE = re.compile(BLOCK_ID_PATTERN)
_WHITESPACE_RE = re.compile(r"\s+")


#: bidi embeddings, overrides, isolates and marks (U+202E can make "txt.exe" read "exe.txt"),
#: which change how a reader sees text without being part of it
BIDI_CONTROLS_RE = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def without_bidi_controls(text: str) -> str:
    """`text` with every bidi control turned into a space, as admission does for host summaries."""
    return BIDI_CONTROLS_RE.sub(" ", text)


def normalize_text(text: str) -> str:
    """Case-preserving NFKC with runs of whitespace collapsed to one space and the ends trimmed."""
    return _WHITESPACE_RE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def content_hash(text: str) -> str:
    """Full SHA-256 hex digest of the normalised text: the identity of a memory's content."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def memory_id(text: str) -> str:
    """The block id memvault writes for a fact it stores (`m-1f3a9c0d2e`)."""
    return MEMORY_ID_PREFIX + content_hash(text)[:ID_HEX_LENGTH]


def derived_id(text: str, occurrence: int) -> str:
    """A stable id for the `occurrence`-th (0-based) id-less bullet with this text in one file."""
    key = f"{normalize_text(text)}\0{occurrence}".encode()
    return DERIVED_ID_PREFIX + hashlib.sha256(key).hexdigest()[:ID_HEX_LENGTH]


def is_valid_block_id(value: str) -> bool:
    return _BLOCK_ID_RE.fullmatch(value) is not None
