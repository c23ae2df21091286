"""Documents: project records in `documents/*.md` under a byte budget, cold ones in `documents/archived/`."""

from memvault.vault.documents.format import (
    ARCHIVED_DIR,
    DEFAULT_DOCUMENTS_LIMIT,
    DOCUMENTS_DIR,
    MAX_DOCUMENT_BYTES,
    ArchivedDocument,
    CapacityPlan,
    ColdIndexer,
    ColdReference,
    Document,
    DocumentReceipt,
    capacity_plan,
    parse_document,
    render_document,
    slug,
)
from memvault.vault.documents.store import DocumentStore

__all__ = [
    "ARCHIVED_DIR",
    "DEFAULT_DOCUMENTS_LIMIT",
    "DOCUMENTS_DIR",
    "MAX_DOCUMENT_BYTES",
    "ArchivedDocument",
    "CapacityPlan",
    "ColdIndexer",
    "ColdReference",
    "Document",
    "DocumentReceipt",
    "DocumentStore",
    "capacity_plan",
    "parse_document",
    "render_document",
    "slug",
]
