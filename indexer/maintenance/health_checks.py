"""What a health check is: the `Finding` it reports, the `HealthContext` it looks at, and the
registry (`CHECKS`) that `health.check_health` runs in order.

Its own module so that checks living beside what they check (`semantic_health.py`,
`server_health.py`) need not import `health.py`, which runs them.
"""

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from memvault.indexer.maintenance.derived import DerivedIndex, FileIndexing, read_note_records
from memvault.vault.layout import VaultLayout

ERROR, WARNING = "error", "warning"
REBUILD = "memvault rebuild"


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # ERROR or WARNING
    code: str  # machine-readable: "missing_row", "conflict_markers", ...
    subject: str  # the file, row or component concerned
    message: str
    fix: str  # the exact command or edit that repairs it

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class HealthContext:
    """What checks look at. The index is opened once; canonical files are read lazily, once."""

    layout: VaultLayout
    config: object  # vault.config.Config
    strict: bool
    index: DerivedIndex | None = None
    index_problem: str | None = None
    details: dict = field(default_factory=dict)  # extra JSON output (counts) checks may add
    _canonical: dict[str, FileIndexing] | None = None

    def canonical(self) -> dict[str, FileIndexing]:
        """Every note on disk, read and parsed now (strict checks only: this reads everything)."""
        if self._canonical is None:
            zone = self.config.memory.time_zone
            self._canonical = {p: read_note_records(self.layout, p, zone) for p in self.layout.note_relpaths()}
        return self._canonical


Check = Callable[[HealthContext], Iterable[Finding]]
#: (name, check, strict_only), run in order
CHECKS: list[tuple[str, Check, bool]] = []


def register_check(name: str, check: Check, *, strict_only: bool = False) -> None:
    """Add a check (idempotent by name: registering again replaces it)."""
    CHECKS[:] = [entry for entry in CHECKS if entry[0] != name]
    CHECKS.append((name, check, strict_only))
