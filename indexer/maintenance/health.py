"""`memvault health`: does the derived state agree with the canonical files?

Health is a list of checks (`CHECKS`); each looks at one thing and returns findings that name
the subject, what is wrong and the exact fix to run. Other parts of memvault add their own with
`register_check` (the replay sidecar's exact comparison registers as strict-only).

* error: derived state disagrees with the files (missing, extra or stale rows, an unreadable
  index, vectors built for another embedding model, a broken intake ledger). `health` exits 1.
* warning: the files need a person (merge-conflict markers, invalid UTF-8, a pasted duplicate
  id, a bad frontmatter zone) or a leftover needs sweeping. Reported; only `--strict` fails on it.

The default run trusts the stat fast path and per-file row counts (cheap at any size);
`--strict` re-reads every note and compares every stored field of every row.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from memvault.indexer.maintenance.derived import DerivedIndex, read_note_records
from memvault.indexer.maintenance.generations import CONFLICT_PROBLEM, current_generation, stray_generations
from memvault.indexer.maintenance.git_health import check_git_drivers
from memvault.indexer.maintenance.health_checks import (
    CHECKS,
    ERROR,
    REBUILD,
    WARNING,
    Finding,
    HealthContext,
    register_check,
)
from memvault.indexer.maintenance.leftovers import stray_temp_files
from memvault.indexer.maintenance.replay_index import replay_findings
from memvault.indexer.maintenance.semantic_health import check_extra_vectors
from memvault.indexer.maintenance.sync import Row, needs_reading
from memvault.indexer.maintenance.unindexed import unindexed_daily_files
from memvault.vault.capture.stats import not_extracting, summarize
from memvault.vault.errors import IndexUnavailable, VaultError, VaultLocked
from memvault.vault.intake.files import PENDING, IntakeDirs
from memvault.vault.intake.projection import projection_problem
from memvault.vault.intake.snapshot import list_entries, runtime_snapshot
from memvault.vault.intake.state import read_record
from memvault.vault.layout import VaultLayout
from memvault.vault.locks import LivenessFence, VaultLock, fence_holder_pid

#: a due admitted turn older than this means nobody drains the intake
STUCK_TURN_SECONDS = 60.0


@dataclass(frozen=True)
class HealthReport:
    strict: bool
    checks: tuple[str, ...]
    findings: tuple[Finding, ...]
    details: dict

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def healthy(self) -> bool:
        return not self.errors and not (self.strict and self.warnings)

    def fixes(self) -> list[str]:
        """Each distinct fix once, errors' first: what to run or do, in order."""
        ordered = self.errors + self.warnings
        return list(dict.fromkeys(f.fix for f in ordered))

    def to_json(self) -> dict:
        return {
            "healthy": self.healthy,
            "strict": self.strict,
            "checks": list(self.checks),
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [f.to_json() for f in self.findings],
            "fixes": self.fixes(),
            "details": self.details,
        }


def check_health(
    layout: VaultLayout,
    config,
    *,
    strict: bool = False,
    extra: Iterable[Finding] = (),
    index=None,
    index_problem: str | None = None,
) -> HealthReport:
    """Run every check (strict-only ones with `strict`), plus `extra` findings the caller made
    (the owner's own state). Reads only: repairs nothing. `index`: a server backend's serving
    generation (`maintenance/server_index.py`) to check instead of `.index/`, or, with
    `index_problem`, why there is none."""
    context = HealthContext(layout, config, strict)
    if index is not None or index_problem is not None:
        context.index, context.index_problem = index, index_problem
    else:
        try:
            context.index = DerivedIndex.open_current(layout)
            if context.index is None:
                context.index_problem = "the vault has no index yet"
        except (IndexUnavailable, OSError, ValueError) as exc:
            context.index_problem = str(exc)
    findings: list[Finding] = []
    ran = []
    for name, check, strict_only in CHECKS:
        if strict_only and not strict:
            continue
        ran.append(name)
        findings.extend(check(context))
    findings.extend(extra)
    return HealthReport(strict, tuple(ran), tuple(findings), context.details)


# --- the index against the files -----------------------------------------------------------


def check_index_opens(ctx: HealthContext) -> Iterable[Finding]:
    if ctx.index_problem is not None:
        yield Finding("index", ERROR, "index_unavailable", ".index/", ctx.index_problem, REBUILD)
        return
    ctx.details["generation"] = ctx.index.generation.name
    ctx.details["rows"] = ctx.index.bm25.count()
    ctx.details["deletedRows"] = ctx.index.deleted_rows()


def check_files(ctx: HealthContext) -> Iterable[Finding]:
    """Fast: which notes changed since indexing (stat, hash when racy), and row counts per file."""
    if ctx.index is None:
        return
    manifest = ctx.index.manifest.files
    on_disk = set(ctx.layout.note_relpaths())
    counts = ctx.index.row_counts()
    for path in sorted(on_disk | set(manifest) | set(counts)):
        known = manifest.get(path)
        if path not in on_disk:
            if known is not None or counts.get(path):
                yield Finding(
                    "files",
                    ERROR,
                    "vanished_file",
                    path,
                    f"{path} is gone but the index still has {counts.get(path, 0)} row(s) from it",
                    REBUILD,
                )
        elif known is None:
            yield Finding("files", ERROR, "unindexed_file", path, f"{path} has never been indexed", REBUILD)
        elif needs_reading(ctx.layout.root / path, known) and not _same_bytes(ctx, path, known.sha256):
            yield Finding("files", ERROR, "stale_file", path, f"{path} changed since it was indexed", REBUILD)
        elif counts.get(path, 0) != known.rows:
            yield Finding(
                "files",
                ERROR,
                "row_count",
                path,
                f"{path} produced {known.rows} row(s) but the index holds {counts.get(path, 0)}",
                REBUILD,
            )


def _same_bytes(ctx: HealthContext, path: str, sha256: str) -> bool:
    fresh = read_note_records(ctx.layout, path, ctx.config.memory.time_zone)
    return fresh.state is not None and fresh.state.sha256 == sha256


def check_rows(ctx: HealthContext) -> Iterable[Finding]:
    """Strict: every stored field of every row against the files read now."""
    if ctx.index is None:
        return
    rows = ctx.index.all_rows()
    indexed: dict[str, Row] = {}
    for row in rows:
        if row.key in indexed:
            yield Finding("rows", ERROR, "duplicate_row", row.key, f"the index holds {row.key} more than once", REBUILD)
        indexed[row.key] = row
    expected: dict[str, Row] = {}
    for path, item in ctx.canonical().items():
        known = ctx.index.manifest.files.get(path)
        if item.state is not None and known is not None and known.sha256 != item.state.sha256:
            yield Finding("rows", ERROR, "stale_file", path, f"{path} differs from the bytes the index saw", REBUILD)
        for record in item.records:
            row = Row.of_record(record)
            expected[row.key] = row
    for key in sorted(set(expected) | set(indexed)):
        want, have = expected.get(key), indexed.get(key)
        if have is None:
            yield Finding("rows", ERROR, "missing_row", key, f"{key} is in the notes but not in the index", REBUILD)
        elif want is None:
            yield Finding("rows", ERROR, "extra_row", key, f"{key} is in the index but not in the notes", REBUILD)
        elif want != have:
            fields = [name for name in Row.__dataclass_fields__ if getattr(want, name) != getattr(have, name)]
            yield Finding(
                "rows", ERROR, "stale_row", key, f"{key} differs from its note in {', '.join(fields)}", REBUILD
            )


# --- what people left in the files ---------------------------------------------------------


def check_hand_edits(ctx: HealthContext) -> Iterable[Finding]:
    """Notes that need a person: reported from the manifest, or from a fresh read when strict."""
    if ctx.strict or ctx.index is None:
        states = {p: item.state for p, item in ctx.canonical().items() if item.state is not None}
    else:
        states = ctx.index.manifest.files
    for path, state in sorted(states.items()):
        if state.problem:
            yield _problem_finding(path, state.problem)
        for issue in state.issues:
            yield _issue_finding(path, issue)


def _problem_finding(path: str, problem: str) -> Finding:
    if problem == CONFLICT_PROBLEM:
        return Finding(  # degraded, not healthy (issue 44): both sides are indexed, marked in conflict
            "hand_edits",
            ERROR,
            "conflict_markers",
            path,
            f"{path} has merge-conflict markers; the bullets of both sides are indexed and marked in conflict",
            f"memvault git resolve {path} (keeps both sides' memories), or resolve the conflict in {path} by "
            "hand (delete the <<<<<<< ======= >>>>>>> lines); then git add it",
        )
    if problem.startswith("invalid UTF-8"):
        return Finding(
            "hand_edits",
            WARNING,
            "invalid_utf8",
            path,
            f"{path}: {problem}; the file is not indexed",
            f"re-save {path} as UTF-8 (fix the bytes at the offset given)",
        )
    return Finding(
        "hand_edits",
        WARNING,
        "unindexed_file",
        path,
        f"{path}: {problem}; the file is not indexed",
        f"replace {path} with a regular UTF-8 markdown file under 16 MiB",
    )


def _issue_finding(path: str, issue: str) -> Finding:
    if issue.startswith("duplicate id"):
        return Finding(
            "hand_edits",
            WARNING,
            "duplicate_id",
            path,
            f"{path}: {issue}",
            f"in {path}, remove the repeated ^id from the pasted bullet (or give it a new one)",
        )
    return Finding(
        "hand_edits",
        WARNING,
        "frontmatter_zone",
        path,
        f"{path}: {issue}",
        f"fix the timeZone in {path}'s frontmatter (an IANA name such as Europe/Amsterdam)",
    )


# --- components and leftovers ----------------------------------------------------------------


def check_embedding_identity(ctx: HealthContext) -> Iterable[Finding]:
    """Vectors must come from the configured model: a mismatch is fixed only by a rebuild."""
    embeddings = ctx.config.memory.embeddings
    if ctx.index is None:
        return
    wanted = (
        None
        if embeddings is None
        else {"provider": embeddings.provider, "model": embeddings.model, "dim": embeddings.dim}
    )
    built = ctx.index.manifest.embedding
    if built != wanted and not (built is None and wanted is None):
        yield Finding(
            "vectors",
            ERROR,
            "embedding_mismatch",
            ctx.index.generation.name,
            f"the index was built for embeddings {_describe(built)} but the config says {_describe(wanted)}",
            REBUILD,
        )
    vectors = ctx.index.generation / "vectors"
    if wanted is not None and vectors.is_dir() and getattr(ctx.index, "has_local_vectors", True):
        from memvault.indexer.search.vectors import read_identity

        identity = read_identity(vectors)
        found = (
            None if identity is None else {"provider": identity.provider, "model": identity.model, "dim": identity.dim}
        )
        if found != wanted:
            yield Finding(
                "vectors",
                ERROR,
                "vector_meta_mismatch",
                str(vectors.relative_to(ctx.layout.root)),
                f"the vector meta says {_describe(found)} but the config says {_describe(wanted)}",
                REBUILD,
            )


def check_vector_rows(ctx: HealthContext) -> Iterable[Finding]:
    """Strict, Journal/BuJo: one current vector per curated row, none without a row.

    Vectors may lag BM25 for a moment (they are embedded off the write path); what is still
    missing here after the writers stopped is caught up by the next open, or by a rebuild.
    """
    embeddings = ctx.config.memory.embeddings
    if ctx.index is None or embeddings is None or ctx.config.memory.mode == "lite":
        return
    if not getattr(ctx.index, "has_local_vectors", True):  # a server's rows carry their vectors
        return
    from memvault.indexer.maintenance.semantic import coverage_findings
    from memvault.indexer.search.embeddings import EmbeddingIdentity

    identity = EmbeddingIdentity(embeddings.provider, embeddings.model, embeddings.dim)
    for code, subject, message in coverage_findings(ctx.index.generation, identity, ctx.index.all_rows()):
        yield Finding("vector_rows", ERROR, code, subject, message, REBUILD)


def check_vector_index(ctx: HealthContext) -> Iterable[Finding]:
    """Journal/BuJo: the serving vectors load whole (meta, checksum, count). A truncated, corrupt
    or missing `vectors.hnsw` leaves search degraded to BM25, so plain `health` must say so."""
    embeddings = ctx.config.memory.embeddings
    if ctx.index is None or embeddings is None or ctx.config.memory.mode == "lite":
        return
    if not getattr(ctx.index, "has_local_vectors", True):  # a server's rows carry their vectors
        return
    from memvault.indexer.search.embeddings import EmbeddingIdentity
    from memvault.indexer.search.vectors import VectorIndex, read_identity

    folder = ctx.index.generation / "vectors"
    subject = str(folder.relative_to(ctx.layout.root)) + "/"
    if not folder.is_dir():
        if ctx.index.bm25.count_kind("curated"):
            yield Finding(
                "vector_index",
                ERROR,
                "vectors_missing",
                subject,
                f"{subject} is missing: search runs on BM25 alone",
                REBUILD,
            )
        return
    identity = EmbeddingIdentity(embeddings.provider, embeddings.model, embeddings.dim)
    if read_identity(folder) not in (None, identity):
        return  # another model's vectors: check_embedding_identity reports that
    try:
        VectorIndex.open(folder, identity)
    except (VaultError, OSError) as exc:
        yield Finding(
            "vector_index",
            ERROR,
            "vectors_unreadable",
            subject,
            f"the vector index cannot be loaded, so search runs on BM25 alone ({exc})",
            REBUILD,
        )


def _describe(identity: dict | None) -> str:
    if identity is None:
        return "none"
    return f"{identity.get('provider')}/{identity.get('model')}/{identity.get('dim')}"


def check_generations(ctx: HealthContext) -> Iterable[Finding]:
    """Folders left by a killed rebuild (only when no rebuild is running right now)."""
    strays = stray_generations(ctx.layout.index_dir)
    if not strays or current_generation_or_none(ctx.layout) is None:
        return
    try:
        with VaultLock(ctx.layout.root, name="rebuild", timeout=0):
            pass
    except VaultLocked:
        return  # a rebuild is building one of them
    for name in strays:
        yield Finding(
            "generations",
            WARNING,
            "stray_generation",
            f".index/{name}",
            f".index/{name} is left over from an interrupted rebuild",
            REBUILD,
        )


def current_generation_or_none(layout: VaultLayout):
    try:
        return current_generation(layout.index_dir)
    except IndexUnavailable:
        return None


def check_intake(ctx: HealthContext) -> Iterable[Finding]:
    """The durable intake's content-free counts, and its ledger's integrity."""
    dirs = IntakeDirs(ctx.layout.root)
    if not dirs.exists():
        return
    try:
        snapshot = runtime_snapshot(dirs, datetime.now(UTC))
    except (VaultError, OSError) as exc:
        yield Finding("intake", ERROR, "intake_unreadable", ".capture-intake/", str(exc), "memvault inspect --json")
        return
    counts = snapshot["counts"]
    ctx.details["intake"] = counts
    yield from _stuck_turns(dirs)
    yield from _failing_turns(dirs, ctx.layout, ctx.config.memory.time_zone)
    if not snapshot["ledger"]["ok"]:
        yield Finding(
            "intake",
            ERROR,
            "ledger",
            ".capture-intake/",
            snapshot["ledger"]["problem"],
            "stop the agent, then follow the fix in the message",
        )
    if counts.get("invalid"):
        yield Finding(
            "intake",
            ERROR,
            "invalid_intake",
            ".capture-intake/",
            f"{counts['invalid']} intake record(s) are unreadable",
            "memvault inspect --json",
        )
    if counts.get("dead"):
        yield Finding(
            "intake",
            WARNING,
            "dead_intake",
            ".capture-intake/dead/",
            f"{counts['dead']} intake record(s) gave up after every retry",
            "memvault retry",
        )
    if snapshot.get("unexpectedFiles"):
        yield Finding(
            "intake",
            WARNING,
            "unexpected_files",
            ".capture-intake/",
            f"{snapshot['unexpectedFiles']} unexpected file(s) in the intake folders",
            "memvault inspect --json",
        )


def check_capture(ctx: HealthContext) -> Iterable[Finding]:
    """What recent captures produced (counts only), and a warning when the model extracts nothing."""
    if ctx.config.memory.write_mode != "capture":
        return
    summary = summarize(ctx.layout.root)
    ctx.details["capture"] = {k: v for k, v in summary.items() if k != "recent"}
    if summary["problem"]:
        yield Finding(
            "capture",
            WARNING,
            "capture_stats",
            ".capture-intake/capture-stats.json",
            summary["problem"],
            "nothing to do: the next capture replaces the file",
        )
    warning = not_extracting(summary)
    if warning:
        yield Finding(
            "capture",
            WARNING,
            "not_extracting",
            "memory.llm",
            warning,
            "configure a larger memory.llm.model (try `memvault capture test`), then `memvault retry`",
        )


def _stuck_turns(dirs) -> Iterable[Finding]:
    """Due turns admitted more than a minute ago. With a live owner that is an error (it is not
    draining); with none it is a warning: they wait for the next owner, as a restart resumes them."""
    now = datetime.now(UTC)
    stuck = [
        e
        for e in list_entries(dirs, now)
        if e.get("folder") == "pending" and e.get("due") and _age_seconds(e.get("admittedAt"), now) > STUCK_TURN_SECONDS
    ]
    if not stuck:
        return
    fence = LivenessFence(dirs.root)
    if fence.intact() or fence.is_held_elsewhere():  # an owner lives (this process, or another)
        pid = (fence.holder_info() or {}).get("pid") or fence_holder_pid(dirs.root) or "?"  # live.json may be gone
        yield Finding(
            "intake",
            ERROR,
            "stuck_intake",
            ".capture-intake/pending/",
            f"{len(stuck)} admitted turn(s) have waited more than a minute while a live owner "
            f"(pid {pid}) holds the vault: it is not draining the intake",
            "memvault engine stop --force, then start the owner again (memvault serve)",
        )
        return
    yield Finding(
        "intake",
        WARNING,
        "waiting_intake",
        ".capture-intake/pending/",
        f"{len(stuck)} admitted turn(s) have waited more than a minute: no process is draining the intake",
        "start the owner (memvault serve, or memvault watch), or run `memvault admit` once to drain",
    )


#: failures that no retry cures by itself: the note, the path or the ledger needs a person
_NEEDS_A_PERSON = frozenset({"invalid_note", "unsafe_path", "ledger_integrity", "note_conflict", "unexpected"})
#: how many failing turns health names one by one (the rest are counted)
_NAMED_TURNS = 5


def _failing_turns(dirs, layout, vault_zone: str) -> Iterable[Finding]:
    """Pending turns whose last attempt failed and that wait for the next retry: they make no
    progress until the cause goes. Each is named with its failure, age and the fix; a failure no
    retry can cure (a folder where the note goes, an unwritable note) is an error."""
    now = datetime.now(UTC)
    failing = [
        e
        for e in list_entries(dirs, now)
        if e.get("folder") == PENDING and e.get("failure") and e.get("state") != "invalid"
    ]
    for entry in failing[:_NAMED_TURNS]:
        found = None
        try:
            found = projection_problem(layout, read_record(dirs, PENDING, entry["id"]), vault_zone)
        except (VaultError, OSError, ValueError):
            pass  # it changed meanwhile: the category still says why
        category = entry["failure"]
        age = _describe_age(_age_seconds(entry.get("admittedAt"), now))
        severity = ERROR if category in _NEEDS_A_PERSON or found else WARNING
        why = f": {found[0]}" if found else ""
        yield Finding(
            "intake",
            severity,
            "failing_intake",
            f".capture-intake/pending/{entry['id']}",
            f"admitted turn {entry['id'][:12]}… (admitted {age} ago) failed {entry['attempts']} "
            f"attempt(s) with {category}{why}; next attempt {entry.get('nextAttemptAt') or 'now'}",
            _failing_fix(category, found[1] if found else None, entry["id"]),
        )
    if len(failing) > _NAMED_TURNS:
        yield Finding(
            "intake",
            ERROR,
            "failing_intake",
            ".capture-intake/pending/",
            f"{len(failing) - _NAMED_TURNS} more admitted turn(s) fail and wait for a retry",
            "memvault inspect --json",
        )


def _failing_fix(category: str, remedy: str | None, intake_id: str) -> str:
    retry = f"memvault retry {intake_id}"
    if remedy and remedy.startswith("memvault "):
        return remedy
    if remedy:
        return f"{remedy}; the turn is retried by itself at its next attempt, or at once by `{retry}` (owner stopped)"
    if category in ("vault_locked", "io_error", "index_unavailable"):
        return (
            f"nothing, if it passes: it retries by itself; else look at `memvault inspect {intake_id}`, then `{retry}`"
        )
    if category in ("provider_unavailable", "invalid_model_output"):
        return f"check memory.llm (try `memvault capture test`), then `{retry}`"
    return f"look at `memvault inspect {intake_id}` and the note it projects to, then `{retry}`"


def _describe_age(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _age_seconds(stamp: str | None, now: datetime) -> float:
    if not stamp:
        return 0.0
    try:
        return (now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return 0.0


def owner_findings(pid: int, worker: dict | None) -> list[Finding]:
    """Asked through the owner: its intake worker must be running."""
    if worker is not None and worker.get("running"):
        return []
    state = "never started" if worker is None else ("stopped" if not worker.get("aborted") else "aborted")
    return [
        Finding(
            "engine",
            ERROR,
            "owner_not_draining",
            f"pid {pid}",
            f"the owner (pid {pid}) holds the vault but its intake worker is {state}",
            "memvault engine stop, then start the owner again (memvault serve)",
        )
    ]


def check_replay(ctx: HealthContext) -> Iterable[Finding]:
    """BuJo's replay sidecar against the serving generation's projection, exactly (capture owns it)."""
    generation = None if ctx.index is None else ctx.index.generation
    for severity, code, subject, message, fix in replay_findings(ctx.layout, ctx.config, generation, ctx.strict):
        yield Finding("replay", severity, code, subject, message, fix)


def check_unindexed_files(ctx: HealthContext) -> Iterable[Finding]:
    """Markdown under daily/ that is not indexed (wrong extension, bad date, a symlink...)."""
    for item in unindexed_daily_files(ctx.layout):
        yield Finding("unindexed", WARNING, "unindexed_file", item.path, f"not indexed: {item.why}", item.fix)


def check_temp_files(ctx: HealthContext) -> Iterable[Finding]:
    """Temp files left by a memvault write that was killed before its rename (indexer/maintenance/leftovers.py)."""
    for path, target in stray_temp_files(ctx.layout.root):
        yield Finding(
            "temp_files",
            WARNING,
            "stray_temp_file",
            path,
            f"{path} is left over from an interrupted write of {target} (memvault never reads it)",
            f"remove {path}",
        )


register_check("index", check_index_opens)
register_check("files", check_files)
register_check("rows", check_rows, strict_only=True)
register_check("hand_edits", check_hand_edits)
register_check("vectors", check_embedding_identity)
register_check("vector_index", check_vector_index)
register_check("vector_rows", check_vector_rows, strict_only=True)
register_check("generations", check_generations)
register_check("intake", check_intake)
register_check("git", check_git_drivers)
register_check("capture", check_capture)
register_check("replay", check_replay)
register_check("unindexed", check_unindexed_files)
register_check("temp_files", check_temp_files)
# the second vector list's check (memory.extraEmbeddings) lives beside the semantic index
register_check("extra_vectors", check_extra_vectors)
