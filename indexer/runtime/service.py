"""`RuntimeService`: the runtime layer of one vault wired together for hosts, the CLI and Python.

    service = RuntimeService.open("path/to/vault", env=os.environ)
    service.add("USER", "Prefers metric units.")              # normal path; maintenance if full
    service.create_document("Deploy runbook", body, summary="How we ship")
    turn = service.begin_turn()                               # per executing agent turn
    turn.recall("which color did we pick?")
    wake = service.wake_snapshot()                            # append only if wake.digest changed

Storage stays in vault/ (RuntimeMemory, DocumentStore, SpaceCatalog); this module adds what
needs a chat model or memory-space I/O (maintenance, cold indexes, recall) and applies the
switches: writeEnabled rejects writes, and the General strategy rejects an over-budget runtime
write instead of maintaining it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from memvault.indexer.engine.store import locate_vault
from memvault.indexer.runtime.budget import DocumentRecord, Evidence, Found, TurnRecall
from memvault.indexer.runtime.maintenance import Maintenance
from memvault.indexer.runtime.recall import FusedRecall, SpaceWrite, recall_spaces, search_documents, write_to_space
from memvault.indexer.services.chat import ChatModel, chat_model_from_config
from memvault.vault.clock import utc_now
from memvault.vault.config import Config, load_config
from memvault.vault.documents import DEFAULT_DOCUMENTS_LIMIT, DocumentReceipt, DocumentStore
from memvault.vault.errors import CredentialRefused, InvalidRecord, ProviderUnavailable, VaultError
from memvault.vault.runtime.activity import Switches
from memvault.vault.runtime.commit import Boundary
from memvault.vault.runtime.entries import CapacityExceeded
from memvault.vault.runtime.memory import Overflow, RuntimeMemory, RuntimeReceipt, RuntimeView
from memvault.vault.runtime.mutations import Mutation, make_add, make_remove, make_replace
from memvault.vault.runtime.wake import WakeSnapshot, build_wake
from memvault.vault.spaces import Space, SpaceCatalog

SPACES_DIR = "spaces"
MAX_RELATED_QUERY_CHARS = 1_200
DEFAULT_SWITCHES = Switches()  # frozen, so one shared default is safe


class RuntimeService:
    def __init__(
        self,
        root: Path,
        config: Config,
        *,
        spaces_root: Path | None = None,
        chat: ChatModel | None = None,
        switches: Switches = DEFAULT_SWITCHES,
        clock: Callable[[], datetime] = utc_now,
        boundary: Boundary | None = None,
        documents_limit: int = DEFAULT_DOCUMENTS_LIMIT,
    ) -> None:
        self.root = Path(root).resolve()
        self.config = config
        self.switches = switches
        self.runtime = RuntimeMemory.for_vault(self.root, config, clock=clock, boundary=boundary)
        self.documents = DocumentStore(self.root, limit_bytes=documents_limit, clock=clock, boundary=boundary)
        self.spaces = SpaceCatalog(
            Path(spaces_root) if spaces_root is not None else self.root / SPACES_DIR,
            clock=clock,
            time_zone=config.memory.time_zone,
        )
        self.maintenance = Maintenance(self.runtime, self.spaces, chat)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike | None = None,
        *,
        env: Mapping[str, str] | None = None,
        chat: ChatModel | None = None,
        **kwargs,
    ) -> RuntimeService:
        """Open a vault's runtime layer; the chat model comes from `memory.llm` unless one is given."""
        env = {} if env is None else dict(env)
        root = locate_vault(path, env, Path.cwd())
        config = load_config(root, env)
        if chat is None:
            chat = chat_or_reason(config, env)
        kwargs.setdefault("switches", switches_from_config(config))
        return cls(root, config, chat=chat, **kwargs)

    # --- runtime memory ------------------------------------------------------------------------

    def show(self) -> RuntimeView:
        return self.runtime.load()

    def add(self, target: str, content: str, importance: int = 3) -> RuntimeReceipt:
        return self._write(make_add(target, content, importance))

    def replace(self, target: str, old_text: str, content: str, importance: int | None = None) -> RuntimeReceipt:
        return self._write(make_replace(target, old_text, content, importance))

    def remove(self, target: str, old_text: str) -> RuntimeReceipt:
        return self._write(make_remove(target, old_text))

    def _write(self, mutation: Mutation) -> RuntimeReceipt:
        self.switches.require_write(f"runtime {mutation.kind}")
        try:
            return self.runtime.mutate(mutation)
        except CapacityExceeded as exc:
            overflow = exc.overflow
            if not isinstance(overflow, Overflow):
                raise
            if not self.switches.capacity_maintenance:
                raise CapacityExceeded(
                    f"{exc}; the General strategy rejects over-budget writes instead of maintaining them."
                    f" Nothing was written. Fix: remove or shorten {mutation.target} entries first"
                ) from None
            return self.maintenance.run(overflow)

    # --- documents -----------------------------------------------------------------------------

    def create_document(self, title: str, body: str, summary: str = "") -> DocumentReceipt:
        self.switches.require_write("document create")
        return self.documents.create(title, body, summary, indexer=self.maintenance.cold_indexer())

    def update_document(self, doc_id: str, body: str | None = None, **kwargs) -> DocumentReceipt:
        self.switches.require_write("document update")
        return self.documents.update(doc_id, body, indexer=self.maintenance.cold_indexer(), **kwargs)

    def archive_document(self, doc_id: str, expected_revision: int | None = None) -> DocumentReceipt:
        self.switches.require_write("document archive")
        return self.documents.archive(
            doc_id, expected_revision=expected_revision, indexer=self.maintenance.cold_indexer()
        )

    # --- memory spaces -------------------------------------------------------------------------

    def create_space(self, title: str, description: str = "", *, active: bool = True) -> Space:
        self.switches.require_write("space create")
        return self.spaces.create(title, description, active=active)

    def remember_in_space(self, space_id: str, text: str) -> SpaceWrite:
        """An explicit long-term write; a successful write to an inactive space activates it."""
        self.switches.require_write("remember")
        self.spaces.get(space_id)
        return write_to_space(self.spaces, space_id, text)

    def active_space_ids(self) -> tuple[str, ...]:
        return tuple(space.id for space in self.spaces.list() if space.active)

    def recall(self, query: str, space_ids: Sequence[str] | None = None) -> FusedRecall:
        """Unbudgeted fused recall (the CLI and the General strategy); agents use `begin_turn`."""
        granted = self.active_space_ids()
        scope = tuple(space_ids) if space_ids and set(space_ids) <= set(granted) else granted
        return recall_spaces(self.spaces, query, scope)

    def begin_turn(self, granted: Sequence[str] | None = None) -> TurnRecall:
        """A fresh budget for one executing agent turn, pinned to the spaces active right now."""
        problem = None
        try:
            pinned = tuple(granted) if granted is not None else self.active_space_ids()
        except VaultError as exc:  # an unreadable catalog: recall says so; documents still work
            pinned, problem = (), f"memory spaces unavailable: {exc}"

        def search(query: str, scope: tuple[str, ...]) -> Found:
            if problem or not scope:
                return Found((), (problem or "no active memory space to recall from",))
            fused = recall_spaces(self.spaces, query, scope)
            return Found((Evidence(hit.space_id, hit.id, hit.text, hit.source) for hit in fused.hits), fused.degraded)

        def documents(query: str, window: int) -> list[DocumentRecord]:
            hits = search_documents(self.documents, query, window)
            return [DocumentRecord(hit.id, hit.title, hit.path, hit.excerpt) for hit in hits]

        def related(origin: Evidence) -> list[Evidence]:
            # the record's nearest neighbours in its own space: the same hybrid recall, seeded by its text
            fused = recall_spaces(self.spaces, origin.text[:MAX_RELATED_QUERY_CHARS], (origin.space_id,))
            return [Evidence(h.space_id, h.id, h.text, h.source) for h in fused.hits if h.id != origin.id]

        return TurnRecall(search, pinned, documents, related)

    # --- wake ----------------------------------------------------------------------------------

    def wake_snapshot(self, *, reconcile: bool = True) -> WakeSnapshot:
        """The complete runtime state and bounded covers. With `reconcile` (and writes enabled),
        hand edits are adopted first so the agent sees what the person wrote."""
        view = None
        if reconcile and self.switches.write_enabled:
            try:
                view = self.runtime.reconcile()
            except (InvalidRecord, CredentialRefused):
                view = None  # an edit that cannot be adopted: show the committed state, flagged
        view = view or self.runtime.load()
        return build_wake(view, self.documents.list(), self.spaces.model_catalog())


def switches_from_config(config: Config) -> Switches:
    """The spec's switches as the vault's config (memory.runtime.*) sets them."""
    settings = config.memory.runtime
    return Switches(
        strategy=settings.strategy,
        recall_mode=settings.recall_mode,
        writeback_mode=settings.writeback_mode,
        lifecycle_enabled=settings.lifecycle_enabled,
        routing_guidance=settings.routing_guidance,
        write_enabled=settings.write_enabled,
    )


def chat_or_reason(config: Config, env: Mapping[str, str]) -> ChatModel | None:
    """The configured chat model; one that cannot be built fails only the write that needs it."""
    try:
        return chat_model_from_config(config, env)
    except ProviderUnavailable as exc:
        return _UnavailableChat(exc)


class _UnavailableChat:
    """Stands in for a configured model that cannot be built (e.g. its API key is unset)."""

    def __init__(self, error: ProviderUnavailable) -> None:
        self.error = error

    def complete(self, messages, *, response_format_json: bool, output=None) -> str:
        raise ProviderUnavailable(str(self.error))
