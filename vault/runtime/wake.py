"""The Wake snapshot: what an agent sees of its memory at the start of each root turn.

A complete, revisioned USER/MEMORY state (never a patch against an earlier message), plus
bounded covers of documents and memory spaces (never their full catalogs). Entry text is copied
literally, with no template interpolation. `digest` lets a host append a new message only when
the snapshot changed. The static protocol and routing sections are constants, byte-identical
across writes, so they can sit in the system prompt's cached prefix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from memvault.vault.runtime.entries import MEMORY, USER, packed_bytes
from memvault.vault.runtime.memory import RuntimeView

DOCUMENT_COVER_LIMIT, SPACE_COVER_LIMIT = 8, 8
COVER_LINE_CHARS = 200

RUNTIME_MEMORY_PROTOCOL = """\
Runtime memory is always loaded: USER holds durable facts about the user (profile, preferences),
MEMORY holds compact working rules and facts no document covers. Each entry is one line. Add only
new, explicit, durable assertions; replace or remove an entry by quoting its exact text (or a
unique part of it). Project records belong in documents, not in MEMORY. When a target is full,
USER is compacted and MEMORY's least important entries move to long-term memory spaces.
"""

ROUTING_GUIDANCE = """\
Answer from the conversation and the repository first. Use the runtime memory below as given.
Recall long-term memory only when the answer depends on something earlier sessions established;
ask one query, and refine once only if the evidence is insufficient.
"""


@dataclass(frozen=True)
class WakeSnapshot:
    revision: int
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def changed_since(self, previous_digest: str | None) -> bool:
        return previous_digest != self.digest


def _cover_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= COVER_LINE_CHARS else flat[: COVER_LINE_CHARS - 3] + "..."


def build_wake(view: RuntimeView, documents: Sequence, spaces: Sequence[dict]) -> WakeSnapshot:
    """`documents`: active Document records; `spaces`: model-facing covers (SpaceCatalog.model_catalog)."""
    lines = [f'<memvault-wake revision="{view.revision}">', f"## Runtime memory (revision {view.revision})"]
    for target in (USER, MEMORY):
        entries = view.state.of(target)
        used = packed_bytes(entry.content for entry in entries)
        lines.append(f"### {target} ({used}/{view.limits[target]} bytes, {len(entries)} entries)")
        if view.files.get(target) == "edited":
            lines.append(f"(runtime/{target}.md has a hand edit not adopted yet; this is revision {view.revision})")
        lines += [f"- {entry.content}" for entry in entries] or ["(empty)"]
    recent = sorted(documents, key=lambda doc: (doc.updated, doc.id), reverse=True)[:DOCUMENT_COVER_LIMIT]
    lines.append(f"## Documents ({len(documents)} active, showing {len(recent)})")
    lines += [_cover_line(f"- {doc.id}: {doc.title}" + (f" — {doc.summary}" if doc.summary else "")) for doc in recent]
    shown = list(spaces)[:SPACE_COVER_LIMIT]
    lines.append(f"## Memory spaces ({len(spaces)} listed, showing {len(shown)})")
    for space in shown:
        state = "active" if space.get("active") else "inactive"
        detail = f" — {space['description']}" if space.get("description") else ""
        lines.append(_cover_line(f"- {space['id']} ({state}): {space['title']}{detail}"))
    lines.append("</memvault-wake>")
    return WakeSnapshot(view.revision, "\n".join(lines) + "\n")
