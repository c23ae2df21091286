"""What a valid `memvault.json` holds: its keys in order, each leaf's type and example, the
allowed values, ranges and defaults, and the environment variables that set them.

The rules that check a parsed file against this, with their messages, are `vault/config_checks.py`;
`vault/config.py` reads files and the environment and builds the frozen `Config`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memvault.vault.limits import (
    IDLE_REVIEW_MIN_INTERVAL_MS,
    IDLE_REVIEW_MS,
    RUNTIME_MEMORY_LIMIT_BYTES,
    RUNTIME_USER_LIMIT_BYTES,
)

MAX_CONFIG_BYTES = 1024 * 1024
MODES = ("lite", "journal", "bujo")
WRITE_MODES = ("disabled", "append-host-summary", "capture")
LLM_PROVIDERS = MappingProxyType({"ollama": "http://localhost:11434", "openai": "https://api.openai.com/v1"})
#: how the system prompt reaches the chat model: as a system message, folded into the first user
#: message (for chat templates without a system role), or chosen from the model's name
SYSTEM_ROLES = ("auto", "system", "fold")
#: the rerank block (docs/configuration.md, "Reranker"): one provider, two wire formats
RERANK_PROVIDERS = ("http",)
RERANK_FORMATS = ("cohere", "tei")
DEFAULT_RERANK_TIMEOUT_MS, MAX_RERANK_TIMEOUT_MS = 2000, 60_000
DEFAULT_RERANK_CANDIDATES, MAX_RERANK_CANDIDATES = 40, 100
DEFAULT_LLM_TIMEOUT_MS, MAX_LLM_TIMEOUT_MS = 60_000, 3_600_000
#: connections one process holds to the index server at most, and the bound on every statement
#: and socket wait there (backend/postgres/connection.py)
DEFAULT_INDEX_POOL_SIZE, MAX_INDEX_POOL_SIZE = 4, 64
DEFAULT_INDEX_TIMEOUT_SECONDS, MAX_INDEX_TIMEOUT_SECONDS = 30, 3600
MAX_EMBEDDING_DIM = 8192
RUNTIME_LIMIT_RANGE = (256, 1024 * 1024)
#: memory.runtime keys with a fixed set of values (the Layered strategy's switches)
RUNTIME_CHOICES = MappingProxyType(
    {"strategy": ("layered", "general"), "recallMode": ("on", "off"), "writebackMode": ("on", "off")}
)
#: memory.runtime timing and size keys: (low, high), inclusive
RUNTIME_RANGES = MappingProxyType(
    {
        "memory.runtime.idleReviewMs": (1_000, 86_400_000),
        "memory.runtime.idleReview.minIntervalMs": (0, 86_400_000),
        "memory.runtime.idleReview.maxPerSession": (1, 1_000),
        "memory.runtime.idleReview.maxContextChars": (1_000, 200_000),
    }
)


@dataclass(frozen=True)
class EmbeddingProvider:
    model: str  # the default model
    dim: int  # the default dim
    endpoint: str | None  # None: runs in-process
    fixed: bool  # in-process: exactly one model with a fixed dim


EMBEDDING_PROVIDERS = MappingProxyType(
    {
        "builtin": EmbeddingProvider("wordllama-l2-supercat", 256, None, True),
        "e5-small": EmbeddingProvider("multilingual-e5-small-q4", 384, None, True),
        "ollama": EmbeddingProvider("nomic-embed-text:v1.5", 768, "http://localhost:11434", False),
        "lmstudio": EmbeddingProvider("text-embedding-nomic-embed-text-v1.5", 768, "http://localhost:1234/v1", False),
        "openai": EmbeddingProvider("text-embedding-3-small", 768, "https://api.openai.com/v1", False),
    }
)
DEFAULT_EMBEDDING_PROVIDER = "ollama"  # the spec's default once the block is present

#: environment variable → dotted config key; the loader and docs/configuration.md both use it
ENV_VARS = MappingProxyType(
    {
        "MEMVAULT_MEMORY_MODE": "memory.mode",
        "MEMVAULT_MEMORY_WRITE_MODE": "memory.writeMode",
        "MEMVAULT_MEMORY_RECALL_TOOL_ENABLED": "memory.recallTool.enabled",
        "MEMVAULT_MEMORY_LLM_MODEL": "memory.llm.model",
        "MEMVAULT_MEMORY_LLM_ENDPOINT": "memory.llm.endpoint",
        "MEMVAULT_MEMORY_LLM_TIMEOUT_MS": "memory.llm.timeoutMs",
        "MEMVAULT_MEMORY_EMBEDDINGS_PROVIDER": "memory.embeddings.provider",
        "MEMVAULT_MEMORY_EMBEDDINGS_MODEL": "memory.embeddings.model",
        "MEMVAULT_MEMORY_EMBEDDINGS_DIM": "memory.embeddings.dim",
        "MEMVAULT_MEMORY_TIME_ZONE": "memory.timeZone",
        "MEMVAULT_INDEX_POOL_SIZE": "index.poolSize",
        "MEMVAULT_INDEX_TIMEOUT_SECONDS": "index.timeoutSeconds",
        "MEMVAULT_INDEX_POOLER": "index.pooler",
    }
)
#: the vault's location; read by vault discovery (`--vault` > this > the nearest enclosing vault), not by load_config
VAULT_PATH_ENV = "MEMVAULT_MEMORY_PATH"

# Object keys and their children, in the documented order render_config writes them.
OBJECTS = MappingProxyType(
    {
        "": ("memory", "tools", "index"),
        "memory": (
            "mode",
            "writeMode",
            "path",
            "timeZone",
            "embeddings",
            "extraEmbeddings",
            "llm",
            "rerank",
            "recallTool",
            "rememberTool",
            "runtime",
        ),
        "memory.embeddings": ("provider", "model", "dim", "endpoint", "apiKeyEnv"),
        #: a second vector list fused beside memory.embeddings' (docs/configuration.md, "Extra embeddings")
        "memory.extraEmbeddings": ("provider", "model", "dim", "endpoint", "apiKeyEnv"),
        "memory.llm": ("provider", "model", "endpoint", "timeoutMs", "apiKeyEnv", "systemRole"),
        "memory.rerank": ("provider", "endpoint", "model", "format", "timeoutMs", "candidates", "apiKeyEnv"),
        "memory.recallTool": ("enabled",),
        "memory.rememberTool": ("enabled",),
        "memory.runtime": (
            "userLimit",
            "memoryLimit",
            "strategy",
            "recallMode",
            "writebackMode",
            "lifecycleEnabled",
            "routingGuidance",
            "writeEnabled",
            "idleReviewMs",
            "idleReview",
        ),
        "memory.runtime.idleReview": ("enabled", "minIntervalMs", "maxPerSession", "maxContextChars", "runtimeMemory"),
        "tools": ("allowedTools", "deniedTools", "hostTools"),
        "tools.hostTools": ("runHistory", "sessionHistory"),
        "index": ("backend", "name", "dsn", "poolSize", "timeoutSeconds", "pooler", "sessionDsn"),
    }
)
# Leaf key → (type, an example value for messages). The example is what a fix suggests.
LEAVES: Mapping[str, tuple[type, Any]] = MappingProxyType(
    {
        "memory.mode": (str, "journal"),
        "memory.writeMode": (str, "append-host-summary"),
        "memory.path": (str, "."),
        "memory.timeZone": (str, "Europe/Amsterdam"),
        "memory.embeddings.provider": (str, "builtin"),
        "memory.embeddings.model": (str, "nomic-embed-text:v1.5"),
        "memory.embeddings.dim": (int, 768),
        "memory.embeddings.endpoint": (str, "http://localhost:11434"),
        "memory.embeddings.apiKeyEnv": (str, "OPENAI_API_KEY"),
        "memory.extraEmbeddings.provider": (str, "e5-small"),
        "memory.extraEmbeddings.model": (str, "multilingual-e5-small-q4"),
        "memory.extraEmbeddings.dim": (int, 384),
        "memory.extraEmbeddings.endpoint": (str, "http://localhost:11434"),
        "memory.extraEmbeddings.apiKeyEnv": (str, "OPENAI_API_KEY"),
        "memory.llm.provider": (str, "ollama"),
        "memory.llm.model": (str, "qwen3:8b"),
        "memory.llm.endpoint": (str, "http://localhost:11434"),
        "memory.llm.timeoutMs": (int, DEFAULT_LLM_TIMEOUT_MS),
        "memory.llm.apiKeyEnv": (str, "OPENAI_API_KEY"),
        "memory.llm.systemRole": (str, "auto"),
        "memory.rerank.provider": (str, "http"),
        "memory.rerank.endpoint": (str, "http://localhost:8080/v1/rerank"),
        "memory.rerank.model": (str, "bge-reranker-v2-m3"),
        "memory.rerank.format": (str, "cohere"),
        "memory.rerank.timeoutMs": (int, DEFAULT_RERANK_TIMEOUT_MS),
        "memory.rerank.candidates": (int, DEFAULT_RERANK_CANDIDATES),
        "memory.rerank.apiKeyEnv": (str, "JINA_API_KEY"),
        "memory.recallTool.enabled": (bool, True),
        "memory.rememberTool.enabled": (bool, True),
        "memory.runtime.userLimit": (int, RUNTIME_USER_LIMIT_BYTES),
        "memory.runtime.memoryLimit": (int, RUNTIME_MEMORY_LIMIT_BYTES),
        "memory.runtime.strategy": (str, "layered"),
        "memory.runtime.recallMode": (str, "on"),
        "memory.runtime.writebackMode": (str, "on"),
        "memory.runtime.lifecycleEnabled": (bool, True),
        "memory.runtime.routingGuidance": (bool, True),
        "memory.runtime.writeEnabled": (bool, True),
        "memory.runtime.idleReviewMs": (int, IDLE_REVIEW_MS),
        "memory.runtime.idleReview.enabled": (bool, False),
        "memory.runtime.idleReview.minIntervalMs": (int, IDLE_REVIEW_MIN_INTERVAL_MS),
        "memory.runtime.idleReview.maxPerSession": (int, 4),
        "memory.runtime.idleReview.maxContextChars": (int, 12_000),
        "memory.runtime.idleReview.runtimeMemory": (bool, True),
        "tools.allowedTools": (list, ["MemoryRecall", "MemoryJournal", "Remember"]),
        "tools.deniedTools": (list, []),
        "tools.hostTools.runHistory": (str, "RunHistory"),
        "tools.hostTools.sessionHistory": (str, "SessionHistory"),
        "index.backend": (str, "postgres"),
        "index.name": (str, "team-notes"),
        "index.dsn": (str, "service=memvault"),
        "index.readDsn": (str, "service=memvault-standby"),
        "index.sessionDsn": (str, "service=memvault-direct"),
        "index.pooler": (str, ""),
        "index.poolSize": (int, DEFAULT_INDEX_POOL_SIZE),
        "index.timeoutSeconds": (int, DEFAULT_INDEX_TIMEOUT_SECONDS),
    }
)
#: an example of each object, for a message that says how to write it
OBJECT_EXAMPLES = {
    "": {"memory": {"mode": "lite"}},
    "memory": {"mode": "lite"},
    "memory.embeddings": {"provider": "builtin"},
    "memory.extraEmbeddings": {"provider": "e5-small"},
    "memory.llm": {"provider": "ollama", "model": "qwen3:8b"},
    "memory.rerank": {"provider": "http", "endpoint": "http://localhost:8080/v1/rerank", "model": "bge-reranker-v2-m3"},
    "memory.recallTool": {"enabled": True},
    "memory.rememberTool": {"enabled": True},
    "memory.runtime": {"userLimit": RUNTIME_USER_LIMIT_BYTES, "memoryLimit": RUNTIME_MEMORY_LIMIT_BYTES},
    "memory.runtime.idleReview": {"enabled": True},
    "tools": {"deniedTools": []},
    "tools.hostTools": {"runHistory": "RunHistory"},
    "index": {"backend": "postgres", "name": "team-notes"},
}
_ENV_INT_RE = re.compile(r"[0-9]{1,10}")

#: where a vault's derived index lives: `.index/` (Tantivy + hnswlib) or a PostgreSQL server
INDEX_BACKENDS = ("local", "postgres")
#: the connection string the postgres backend reads (the entry point passes it down)
INDEX_DSN_ENV = "MEMVAULT_INDEX_DSN"
#: a hot standby's connection string that reads go to (backend/postgres/replica.py)
INDEX_READ_DSN_ENV = "MEMVAULT_INDEX_READ_DSN"
#: a DSN past any transaction-mode pooler, for what needs a session of its own (an owner's fence)
INDEX_SESSION_DSN_ENV = "MEMVAULT_INDEX_SESSION_DSN"
#: index.pooler: "" (MEMVAULT_INDEX_DSN reaches PostgreSQL, or a pooler in session mode) or
#: "transaction" (PgBouncer in transaction mode: no session state, docs/team.md)
INDEX_POOLERS = ("", "transaction")
INDEX_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
