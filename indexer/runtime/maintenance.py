"""Layered capacity maintenance: USER compaction, MEMORY archival, and document cold indexes.

Both runtime paths start from the `Overflow` the normal path raised (a committed snapshot plus
the pending mutation) and end in one `compact_and_mutate` compare-and-swap on that snapshot's
revision. Nothing in runtime/ changes until every check has passed:

USER   -> compactor (chat model, no tools) -> strict plan checks (plans.py) -> packed -> CAS
MEMORY -> keep the most important exact entries that fit; the rest go to
            no eligible space:   runtime/archived/ in the same locked commit, no model
            one space:           directly
            several spaces:      the planner (chat model, no tools) returns routes only;
                                 if the model fails, everything goes to the first destination
          -> each write verified -> CAS

A late revision conflict keeps the original hot entries; copies already written to spaces stay
as safe duplicates (a space cannot share the runtime lock, so they are not rolled back).
"""

from __future__ import annotations

from collections.abc import Sequence

from memvault.indexer.runtime.recall import write_to_space
from memvault.indexer.services.chat import ChatModel
from memvault.vault.documents import ColdIndexer, ColdReference
from memvault.vault.errors import Conflict, ProviderUnavailable
from memvault.vault.runtime.entries import (
    MEMORY,
    USER,
    CapacityExceeded,
    Keyed,
    RuntimeEntry,
    packed_bytes,
    retain_by_importance,
)
from memvault.vault.runtime.memory import Overflow, RuntimeMemory, RuntimeReceipt
from memvault.vault.runtime.mutations import ADD
from memvault.vault.runtime.plans import (
    CompactedEntry,
    compactor_messages,
    parse_compaction,
    parse_routes,
    planner_messages,
)
from memvault.vault.spaces import Space, SpaceCatalog


class Maintenance:
    def __init__(self, runtime: RuntimeMemory, catalog: SpaceCatalog | None, chat: ChatModel | None) -> None:
        self.runtime = runtime
        self.catalog = catalog
        self.chat = chat

    def run(self, overflow: Overflow) -> RuntimeReceipt:
        if overflow.mutation.target == USER:
            return self.compact_user(overflow)
        return self.archive_memory(overflow)

    # --- USER ----------------------------------------------------------------------------------

    def compact_user(self, overflow: Overflow) -> RuntimeReceipt:
        state, mutation, match = overflow.state, overflow.mutation, overflow.match
        eligible = [(i, e) for i, e in enumerate(state.of(USER)) if i != match]
        if self.chat is None:
            raise CapacityExceeded(
                f"runtime/USER.md is full ({overflow.needed} of {overflow.limit} bytes) and no chat model is"
                " configured to compact it; nothing was changed. Fix: configure memory.llm, or remove USER"
                " entries with `memvault runtime remove USER <text>`"
            )
        fixed = [mutation.content or ""]
        budget = overflow.limit - packed_bytes(fixed) - 1
        if not eligible or budget <= 0:
            raise CapacityExceeded(f"the new USER entry alone leaves no room to compact into ({overflow.limit} bytes)")
        sources = [entry for _, entry in eligible]
        text = self.chat.complete(compactor_messages(sources, state.revision, budget), response_format_json=True)

        def fits(planned: list[CompactedEntry]) -> bool:
            return packed_bytes([p.content for p in planned] + fixed) <= overflow.limit

        planned = parse_compaction(text, sources, revision=state.revision, fits=fits, budget=budget)
        now = self.runtime.now()
        hot = [
            Keyed(
                eligible[min(p.source_indexes)][0],
                RuntimeEntry(USER, p.content, p.importance, min(sources[i].created for i in p.source_indexes), now),
            )
            for p in planned
        ]
        return self.runtime.compact_and_mutate(state.revision, mutation, match, hot, maintenance="compacted")

    # --- MEMORY --------------------------------------------------------------------------------

    def archive_memory(self, overflow: Overflow) -> RuntimeReceipt:
        state, mutation, match = overflow.state, overflow.mutation, overflow.match
        entries = state.of(MEMORY)
        eligible = [Keyed(i, e) for i, e in enumerate(entries) if i != match]
        pending = RuntimeEntry(MEMORY, mutation.content or "", 1, "", "")
        fixed = [Keyed(-1 if mutation.kind == ADD else match, pending)]
        kept, left = retain_by_importance(eligible, fixed, overflow.limit)
        destinations = self.destinations()
        if not destinations:
            return self.runtime.compact_and_mutate(
                state.revision, mutation, match, kept, maintenance="archived-locally",
                archived=len(left), local_archive=[item.entry for item in left],
            )  # fmt: skip
        routes = self._routes(left, destinations, state.revision)
        if self.runtime.load().revision != state.revision:
            raise Conflict(
                f"runtime memory changed since revision {state.revision}; nothing was archived and the original"
                " entries are kept. Fix: retry the write"
            )
        for item in left:
            write_to_space(self.catalog, routes[item.key], item.entry.content)  # type: ignore[arg-type]
        return self.runtime.compact_and_mutate(
            state.revision, mutation, match, kept, maintenance="archived-to-spaces", archived=len(left)
        )

    def destinations(self) -> list[Space]:
        return [] if self.catalog is None else self.catalog.eligible()

    def _routes(self, left: Sequence[Keyed], destinations: list[Space], revision: int) -> dict[int, str]:
        first = destinations[0].id
        if len(destinations) == 1 or self.chat is None:
            return {item.key: first for item in left}
        covers = [space.cover() for space in destinations]
        messages = planner_messages([(item.key, item.entry) for item in left], covers, revision)
        try:
            text = self.chat.complete(messages, response_format_json=True)
        except ProviderUnavailable:
            return {item.key: first for item in left}  # the model failed to run: fall back, don't guess
        return parse_routes(text, [item.key for item in left], {s.id for s in destinations}, revision=revision)

    # --- documents -----------------------------------------------------------------------------

    def cold_indexer(self) -> ColdIndexer | None:
        """Writes a document's cold reference to the first eligible space; None when there is none."""
        destinations = self.destinations()
        if not destinations:
            return None
        catalog, target = self.catalog, destinations[0].id

        def index(reference: ColdReference) -> None:
            write_to_space(catalog, target, reference.text())  # type: ignore[arg-type]

        return index
