"""The runtime layer of a vault: hot memory (runtime/USER.md, runtime/MEMORY.md) and its helpers.

`RuntimeMemory` is the deterministic control layer (no model, no network); capacity maintenance
that needs a chat model or memory spaces lives in `memvault.indexer.runtime.service`.
"""

from memvault.vault.runtime.entries import MEMORY, TARGETS, USER, CapacityExceeded, RuntimeEntry
from memvault.vault.runtime.memory import Overflow, RuntimeMemory, RuntimeReceipt, RuntimeView

__all__ = [
    "MEMORY",
    "TARGETS",
    "USER",
    "CapacityExceeded",
    "Overflow",
    "RuntimeEntry",
    "RuntimeMemory",
    "RuntimeReceipt",
    "RuntimeView",
]
