"""The specification's numbers that more than one module needs, each written once.

Every number here is a requirement of spec/ (quoted beside it), not a tuning knob: callers
import the name instead of writing the number again, so changing one here changes behaviour
everywhere it applies, and tests/test_spec_numbers.py pins each one with the spec's literal
through the surface that obeys it. Numbers only one module uses stay in that module.
"""

from __future__ import annotations

from memvault.vault.strict_json import utf16_length

#: "Each capture-model completion is rejected before parsing when it exceeds 262,144 JavaScript
#: characters." JavaScript counts UTF-16 code units, so a character outside the BMP (an emoji)
#: counts twice: measure with `completion_length`, never `len`. Runtime compaction and the
#: chat client use the same cap ("the same cap as capture").
MAX_COMPLETION_UTF16 = 262_144

#: "Shutdown gives work up to 10 seconds to drain; after that deadline it aborts the cooperative
#: active attempt and returns" — every stop on the normal path (owner, intake worker, capture
#: queue, vector queue) waits at most this long.
SHUTDOWN_DRAIN_SECONDS = 10.0

#: "USER add exceeds 4 KiB" and "exceeds the configured limit (10 KiB by default)": the default
#: byte budgets of runtime/USER.md and runtime/MEMORY.md (memory.runtime.userLimit / memoryLimit).
#: A write that lands exactly on the limit fits; only one that exceeds it is over.
RUNTIME_USER_LIMIT_BYTES = 4 * 1024
RUNTIME_MEMORY_LIMIT_BYTES = 10 * 1024

#: "wait idleReviewMs (default 30 s), and at least idleReview.minIntervalMs (default 5 min)
#: after the last attempt"
IDLE_REVIEW_MS = 30_000
IDLE_REVIEW_MIN_INTERVAL_MS = 5 * 60 * 1000

#: "The sidecar itself is strict canonical JSON, an owner-owned single-link regular file with
#: mode 0600": the replay sidecar's only accepted mode.
SIDECAR_MODE = 0o600
#: git writes the files it checks out with 0666 & ~umask (0644 usually), so a cloned or pulled
#: sidecar arrives readable by group and other. memvault narrows such a file to SIDECAR_MODE
#: only when its sole extra bits are group/other read: any bit of this mask (setuid, setgid,
#: sticky, an execute bit, group/other write) means someone else may already have changed it,
#: and the file stays refused.
SIDECAR_NOT_NARROWABLE_BITS = 0o7133


def completion_length(text: str) -> int:
    """A model completion's length as the spec counts it: JavaScript (UTF-16) characters."""
    return utf16_length(text)


def completion_overflow(text: str) -> int | None:
    """The completion's length when it exceeds MAX_COMPLETION_UTF16, else None."""
    length = completion_length(text)
    return length if length > MAX_COMPLETION_UTF16 else None
