"""What a recall request may ask, checked the same wherever it is answered: in the process that
owns the vault, in a client of its owner (indexer/engine/client_reads.py), or against a server.
Light: no numpy, no index."""

from memvault.vault.errors import InvalidRecord

RECALL_MODES = ("tool", "auto")
MAX_RECALL_LIMIT = 100


def check_recall_request(query: object, limit: object, mode: object) -> None:
    """Raise InvalidRecord naming what is wrong with a recall's arguments."""
    if mode not in RECALL_MODES:
        raise InvalidRecord(f"recall mode {mode!r} is not one of {', '.join(RECALL_MODES)}")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_RECALL_LIMIT:
        raise InvalidRecord(f"limit must be an integer from 1 to {MAX_RECALL_LIMIT} (got {limit!r})")
    if not isinstance(query, str):
        raise InvalidRecord(f"query must be text, not {type(query).__name__}")
