"""The vault's configuration: one frozen `Config`, built once at the entry point and passed down.

`<vault>/memvault.json` holds a `memory` block and a `tools` block. Precedence is
flag (`overrides`, keyed by dotted key) > environment (`ENV_VARS`) > file > default.
Library code never reads `os.environ`: callers pass `env`.

Validation fails closed and lists every problem at once; each message names the dotted key,
what is wrong, and the fix. The resolved config carries only what the tier uses: embeddings
for journal/bujo, the chat model for bujo. A block kept for a later tier switch is still
validated, so switching tiers never uncovers an old mistake.
"""

from __future__ import annotations

import json
import os
import stat
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.vault.config_checks import (  # noqa: F401  public names are re-exported
    _check_index,
    _HugeNumber,
    _Problem,
    _problems,
    _show,
    _show_key,
    is_time_zone,
    validate_config_data,
)
from memvault.vault.config_schema import (  # noqa: F401  public names are re-exported
    _ENV_INT_RE,
    DEFAULT_EMBEDDING_PROVIDER,
    DEFAULT_INDEX_POOL_SIZE,
    DEFAULT_INDEX_TIMEOUT_SECONDS,
    DEFAULT_LLM_TIMEOUT_MS,
    DEFAULT_RERANK_CANDIDATES,
    DEFAULT_RERANK_TIMEOUT_MS,
    EMBEDDING_PROVIDERS,
    ENV_VARS,
    INDEX_BACKENDS,
    INDEX_DSN_ENV,
    INDEX_READ_DSN_ENV,
    INDEX_SESSION_DSN_ENV,
    LEAVES,
    LLM_PROVIDERS,
    MAX_CONFIG_BYTES,
    MAX_EMBEDDING_DIM,
    MAX_LLM_TIMEOUT_MS,
    MODES,
    OBJECTS,
    RUNTIME_LIMIT_RANGE,
    VAULT_PATH_ENV,
    WRITE_MODES,
    EmbeddingProvider,
)
from memvault.vault.errors import InvalidConfig
from memvault.vault.layout import CONFIG_FILE
from memvault.vault.limits import (
    IDLE_REVIEW_MIN_INTERVAL_MS,
    IDLE_REVIEW_MS,
    RUNTIME_MEMORY_LIMIT_BYTES,
    RUNTIME_USER_LIMIT_BYTES,
)

# --- the config object ------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingsConfig:
    provider: str
    model: str
    dim: int
    endpoint: str | None  # None for in-process providers (builtin, e5-small)
    api_key_env: str | None = None  # the NAME of the env var holding the key, never the key


@dataclass(frozen=True)
class LlmConfig:
    provider: str
    model: str
    endpoint: str
    timeout_ms: int
    api_key_env: str | None
    system_role: str = "auto"  # auto | system | fold: see docs/capture.md, "Models without a system role"


@dataclass(frozen=True)
class RerankConfig:
    """memory.rerank: a cross-encoder behind an HTTP rerank endpoint (docs/configuration.md)."""

    provider: str
    endpoint: str
    model: str
    format: str = "cohere"  # cohere (Jina/Cohere shape) | tei
    timeout_ms: int = DEFAULT_RERANK_TIMEOUT_MS
    candidates: int = DEFAULT_RERANK_CANDIDATES
    api_key_env: str | None = None  # the NAME of the env var holding the key, never the key


@dataclass(frozen=True)
class HostTools:
    """Tools the agent's host offers beside memvault's; guidance names only the ones set here."""

    run_history: str | None = None
    session_history: str | None = None


@dataclass(frozen=True)
class RuntimeSettings:
    """memory.runtime's strategy switches and idle-review settings (spec: Layered strategy)."""

    strategy: str = "layered"
    recall_mode: str = "on"
    writeback_mode: str = "on"
    lifecycle_enabled: bool = True
    routing_guidance: bool = True
    write_enabled: bool = True
    idle_review_ms: int = IDLE_REVIEW_MS
    idle_review_enabled: bool = False  # a host switches the background review on
    idle_min_interval_ms: int = IDLE_REVIEW_MIN_INTERVAL_MS
    idle_max_per_session: int = 4
    idle_max_context_chars: int = 12_000
    idle_runtime_memory: bool = True


@dataclass(frozen=True)
class ToolsConfig:
    allowed_tools: tuple[str, ...] | None  # None: no allow-list
    denied_tools: tuple[str, ...]
    host_tools: HostTools = HostTools()

    def permits(self, name: str) -> bool:
        """The normal app-tool policy: a deny wins; an allow-list, when present, restricts."""
        if name in self.denied_tools:
            return False
        return self.allowed_tools is None or name in self.allowed_tools


@dataclass(frozen=True)
class MemoryConfig:
    mode: str
    write_mode: str
    time_zone: str
    embeddings: EmbeddingsConfig | None  # set exactly when mode is journal or bujo
    llm: LlmConfig | None  # required for bujo; optional in lite/journal (runtime compaction)
    recall_tool_enabled: bool
    remember_tool_enabled: bool
    runtime_user_limit: int = RUNTIME_USER_LIMIT_BYTES
    runtime_memory_limit: int = RUNTIME_MEMORY_LIMIT_BYTES
    runtime: RuntimeSettings = RuntimeSettings()
    rerank: RerankConfig | None = None  # absent: recall fuses without a second stage
    #: memory.extraEmbeddings: a second model's vector list fused beside `embeddings` (journal/bujo only)
    extra_embeddings: EmbeddingsConfig | None = None

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.time_zone)


@dataclass(frozen=True)
class IndexConfig:
    """Where the vault's derived index lives (docs/team.md): `.index/` by default, or a server."""

    backend: str = "local"  # "local" (Tantivy + hnswlib) | "postgres"
    name: str | None = None  # the vault's name on the server (default: the folder's name)
    #: the libpq connection string: MEMVAULT_INDEX_DSN, else `index.dsn` (never with a password),
    #: else "" (libpq's defaults, PGSERVICE, ~/.pg_service.conf and ~/.pgpass)
    dsn: str = field(default="", repr=False)
    #: index.poolSize: connections one process holds to the server at most (all its stores)
    pool_size: int = DEFAULT_INDEX_POOL_SIZE
    #: index.timeoutSeconds: the bound on every statement and socket wait on the server
    timeout_seconds: int = DEFAULT_INDEX_TIMEOUT_SECONDS
    #: a hot standby connected clients and `--across` read from (MEMVAULT_INDEX_READ_DSN, else
    #: `index.readDsn`, never with a password); "" reads the primary
    read_dsn: str = field(default="", repr=False)
    #: index.pooler (MEMVAULT_INDEX_POOLER): "transaction" when `dsn` reaches PgBouncer (or another
    #: pooler) in transaction mode: connections to it keep no session state (docs/team.md)
    pooler: str = ""
    #: a DSN past the pooler, for what needs a session (a vault's owner, an in-process writer):
    #: MEMVAULT_INDEX_SESSION_DSN, else `index.sessionDsn` (never with a password), else `dsn`
    session_dsn: str = field(default="", repr=False)

    @property
    def owner_dsn(self) -> str:
        """Where what writes the vault's index connects (its owner's fence, wake-up channel,
        rows and rebuilds): the session DSN when one is set, else `dsn`."""
        return self.session_dsn or self.dsn

    @property
    def on_server(self) -> bool:
        """The index lives on an index server (shared, reached by name), not in `.index/`."""
        return self.backend != "local"

    @classmethod
    def server(cls, name: str, dsn: str, *, like: IndexConfig | None = None) -> IndexConfig:
        """A vault reached by its name on the team's index server (docs/team.md), with the bounds
        of `like` (another vault's block, or `server_bounds`'), else the defaults."""
        like = like or cls()
        return cls(
            "postgres", name, dsn, like.pool_size, like.timeout_seconds, like.read_dsn, like.pooler, like.session_dsn
        )


@dataclass(frozen=True)
class Config:
    memory: MemoryConfig
    tools: ToolsConfig
    vault_path: Path | None
    source: str  # one line per used key: `key = value  (file PATH | env VAR | flag | default)`
    index: IndexConfig = IndexConfig()

    def tool_enabled(self, name: str) -> bool:
        """Whether a tool is offered, under the spec's tool policy for the three memory tools."""
        if name in self.tools.denied_tools:
            return False  # an explicit deny wins for every tool, MemoryRecall included
        if name == "MemoryRecall":
            return self.memory.recall_tool_enabled  # gated by recallTool, not by allowedTools
        if name == "MemoryJournal":
            return self.memory.recall_tool_enabled and self.tools.permits(name)
        if name == "Remember":
            return self.memory.remember_tool_enabled and self.tools.permits(name)
        return self.tools.permits(name)


# --- reading the file -------------------------------------------------------------------------


class _JsonObject(dict):
    """A parsed JSON object that remembers keys it saw twice (json.loads keeps only the last)."""

    duplicates: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _JsonObject:
    obj = _JsonObject(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return obj


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value: write a number")


def _parse_int(digits: str) -> int | _HugeNumber:
    return int(digits) if len(digits) <= 20 else _HugeNumber(digits)


def _file_error(path: Path, message: str) -> InvalidConfig:
    error = InvalidConfig(f"invalid config in {path}:\n{message}")
    error.problems, error.path = (message,), path  # type: ignore[attr-defined]
    return error


def _read_file_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when there is no config file (then defaults apply)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # a FIFO must not hang us
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _file_error(path, f"cannot open the file ({exc.strerror}): make it a readable regular file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _file_error(path, "the file is not a regular file: replace it with the JSON config file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise _file_error(path, _oversize(info.st_size))
        chunks, size = [], 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_CONFIG_BYTES:
                raise _file_error(path, _oversize(size))
        return b"".join(chunks)
    except OSError as exc:
        raise _file_error(path, f"cannot read the file ({exc.strerror}): make it a readable regular file") from None
    finally:
        os.close(fd)


def _oversize(size: int) -> str:
    return (
        f"the file is {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit: a config is a few hundred bytes;"
        f" check that {CONFIG_FILE} is the right file"
    )


def _parse_file(path: Path, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start]
        message = f"the file is not UTF-8 (byte 0x{bad:02x} at offset {exc.start}): save it as UTF-8"
        raise _file_error(path, message) from None
    text = text.removeprefix("\ufeff")  # some editors write a byte-order mark; it carries no meaning
    try:
        return json.loads(text, object_pairs_hook=_object_pairs, parse_constant=_reject_constant, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise _file_error(
            path,
            f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}: fix the syntax there"
            " (a trailing comma or a missing quote is the usual cause)",
        ) from None
    except _NotJson as exc:
        raise _file_error(path, str(exc)) from None
    except RecursionError:
        raise _file_error(path, "the file nests objects or arrays too deeply to be a config: rewrite it") from None


def _duplicate_problems(data: object) -> list[_Problem]:
    """Keys given twice, along the schema (anything deeper is already an unknown-key problem)."""
    found, stack = [], [("", data)]
    while stack:
        prefix, obj = stack.pop()
        if not isinstance(obj, Mapping):
            continue
        for name in getattr(obj, "duplicates", ()):
            key = f"{prefix}.{_show_key(name)}" if prefix else _show_key(name)
            found.append(_Problem(f"{key} is given more than once: keep one (JSON keys must be unique)", (key,)))
        children = ((f"{prefix}.{n}" if prefix else str(n), v) for n, v in obj.items())
        stack += [(key, value) for key, value in children if key in OBJECTS]
    return found


# --- environment, flags, merging --------------------------------------------------------------


def _env_values(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """Typed values from ENV_VARS: (dotted key → value, dotted key → var, problems naming the var)."""
    values, origins, problems = {}, {}, []
    for var, key in ENV_VARS.items():
        raw = env.get(var)
        if raw is None:
            continue
        kind = LEAVES[key][0]
        if raw == "":
            problems.append(f"{var} is set but empty: unset it or give it a value like {json.dumps(LEAVES[key][1])}")
        elif kind is bool:
            if raw.lower() in ("true", "1", "false", "0"):
                values[key], origins[key] = raw.lower() in ("true", "1"), var
            else:
                problems.append(f"{var} must be true, false, 1 or 0 (got {_show(raw)}): it sets {key}")
        elif kind is int:
            if _ENV_INT_RE.fullmatch(raw):
                values[key], origins[key] = int(raw), var
            else:
                problems.append(f"{var} must be a whole number like {LEAVES[key][1]} (got {_show(raw)}): it sets {key}")
        else:
            values[key], origins[key] = raw, var
    return values, origins, problems


def _set_leaf(root: Mapping, key: str, value: Any) -> Mapping:
    """A copy of `root` with `key` set, creating blocks on the way; a non-object in the way is left for validation."""
    head, _, rest = key.partition(".")
    if not rest:
        return {**root, head: value}
    child = root.get(head, {})
    if not isinstance(child, Mapping):
        return root
    return {**root, head: _set_leaf(child, rest, value)}


def _parents(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _file_origins(data: object, label: str) -> dict[str, str]:
    origins: dict[str, str] = {}
    for prefix in OBJECTS:
        block: Any = data
        for part in prefix.split(".") if prefix else ():
            block = block.get(part) if isinstance(block, Mapping) else None
        if isinstance(block, Mapping):
            origins.update({f"{prefix}.{n}" if prefix else n: label for n in block if isinstance(n, str)})
    return origins


# --- resolving --------------------------------------------------------------------------------


def _resolve(flat: dict[str, Any]) -> tuple[MemoryConfig, ToolsConfig, dict[str, Any]]:
    """The config object from validated values plus defaults, and every used key's value."""
    get = flat.get
    mode = get("memory.mode", "lite")
    used: dict[str, Any] = {
        "memory.mode": mode,
        "memory.writeMode": get("memory.writeMode", "append-host-summary"),
        "memory.timeZone": get("memory.timeZone", "UTC"),
    }
    embeddings = llm = None
    if mode != "lite":
        embeddings = _embeddings_at(flat, used, "memory.embeddings", DEFAULT_EMBEDDING_PROVIDER)
    extra = _resolve_extra_embeddings(flat, used) if mode != "lite" else None
    # bujo requires the chat model; any tier may configure one for runtime-memory compaction
    if mode == "bujo" or any(key.startswith("memory.llm.") for key in flat):
        name = get("memory.llm.provider", "ollama")
        llm = LlmConfig(
            name,
            get("memory.llm.model"),
            get("memory.llm.endpoint", LLM_PROVIDERS[name]),
            get("memory.llm.timeoutMs", DEFAULT_LLM_TIMEOUT_MS),
            get("memory.llm.apiKeyEnv"),
            get("memory.llm.systemRole", "auto"),
        )
        used.update({f"memory.llm.{k}": v for k, v in zip(OBJECTS["memory.llm"], _values(llm), strict=True)})
    rerank = None
    if "memory.rerank" in flat:
        rerank = RerankConfig(
            get("memory.rerank.provider", "http"),
            get("memory.rerank.endpoint"),
            get("memory.rerank.model"),
            get("memory.rerank.format", "cohere"),
            get("memory.rerank.timeoutMs", DEFAULT_RERANK_TIMEOUT_MS),
            get("memory.rerank.candidates", DEFAULT_RERANK_CANDIDATES),
            get("memory.rerank.apiKeyEnv"),
        )
        used.update({f"memory.rerank.{k}": v for k, v in zip(OBJECTS["memory.rerank"], _values(rerank), strict=True)})
    for key in (
        "memory.recallTool.enabled",
        "memory.rememberTool.enabled",
        "memory.runtime.userLimit",
        "memory.runtime.memoryLimit",
    ):
        used[key] = get(key, LEAVES[key][1])
    runtime_keys = [k for k in _RUNTIME_FIELDS if k in flat or k == "memory.runtime.writeEnabled"]
    used.update({key: get(key, LEAVES[key][1]) for key in runtime_keys})
    runtime = RuntimeSettings(**{field: get(key, LEAVES[key][1]) for key, field in _RUNTIME_FIELDS.items()})
    allowed = get("tools.allowedTools")
    used["tools.allowedTools"] = None if allowed is None else list(allowed)
    used["tools.deniedTools"] = list(get("tools.deniedTools", ()))
    host_tools = HostTools(get("tools.hostTools.runHistory"), get("tools.hostTools.sessionHistory"))
    used.update({f"tools.hostTools.{k}": get(f"tools.hostTools.{k}") for k in OBJECTS["tools.hostTools"]
                 if f"tools.hostTools.{k}" in flat})  # fmt: skip
    memory = MemoryConfig(
        used["memory.mode"], used["memory.writeMode"], used["memory.timeZone"], embeddings, llm,
        used["memory.recallTool.enabled"], used["memory.rememberTool.enabled"],
        used["memory.runtime.userLimit"], used["memory.runtime.memoryLimit"], runtime, rerank, extra,
    )  # fmt: skip
    tools = ToolsConfig(None if allowed is None else tuple(allowed), tuple(used["tools.deniedTools"]), host_tools)
    return memory, tools, used


def _resolve_extra_embeddings(flat: dict[str, Any], used: dict[str, Any]) -> EmbeddingsConfig | None:
    """memory.extraEmbeddings (validated: its provider is given), or None when absent."""
    if "memory.extraEmbeddings" not in flat:
        return None
    return _embeddings_at(flat, used, "memory.extraEmbeddings", None)


def _embeddings_at(
    flat: dict[str, Any], used: dict[str, Any], block: str, default_provider: str | None
) -> EmbeddingsConfig:
    """An embeddings block (`memory.embeddings` or `memory.extraEmbeddings`), its provider's
    defaults filled in, and recorded in `used`."""
    name = flat.get(f"{block}.provider", default_provider)
    provider = EMBEDDING_PROVIDERS[name]
    config = EmbeddingsConfig(
        name,
        flat.get(f"{block}.model", provider.model),
        flat.get(f"{block}.dim", provider.dim),
        flat.get(f"{block}.endpoint", provider.endpoint),
        flat.get(f"{block}.apiKeyEnv"),
    )
    used.update({f"{block}.{k}": v for k, v in zip(OBJECTS[block], _values(config), strict=True)})
    return config


#: dotted memory.runtime key -> RuntimeSettings field
_RUNTIME_FIELDS = {
    "memory.runtime.strategy": "strategy",
    "memory.runtime.recallMode": "recall_mode",
    "memory.runtime.writebackMode": "writeback_mode",
    "memory.runtime.lifecycleEnabled": "lifecycle_enabled",
    "memory.runtime.routingGuidance": "routing_guidance",
    "memory.runtime.writeEnabled": "write_enabled",
    "memory.runtime.idleReviewMs": "idle_review_ms",
    "memory.runtime.idleReview.enabled": "idle_review_enabled",
    "memory.runtime.idleReview.minIntervalMs": "idle_min_interval_ms",
    "memory.runtime.idleReview.maxPerSession": "idle_max_per_session",
    "memory.runtime.idleReview.maxContextChars": "idle_max_context_chars",
    "memory.runtime.idleReview.runtimeMemory": "idle_runtime_memory",
}


def _values(obj: Any) -> tuple:
    return tuple(getattr(obj, f) for f in obj.__dataclass_fields__)


def _source_lines(used: dict[str, Any], origins: dict[str, str]) -> str:
    lines = []
    for key, value in used.items():
        shown = "(none: every tool allowed)" if key == "tools.allowedTools" and value is None else json.dumps(value)
        lines.append(f"{key} = {shown}  ({origins.get(key, 'default')})")
    return "\n".join(lines)


def load_config(
    vault_path: Path | None, env: Mapping[str, str], overrides: Mapping[str, object] | None = None
) -> Config:
    """The vault's config: flag (overrides, by dotted key) > env > `<vault>/memvault.json` > default.

    Raises InvalidConfig listing every problem, one per line, after a line naming the file.
    An override whose value is None is ignored, so a CLI can pass every flag it has.
    """
    path = None if vault_path is None else Path(vault_path) / CONFIG_FILE
    raw = None if path is None else _read_file_bytes(path)
    data: object = {} if raw is None else _parse_file(path, raw)  # type: ignore[arg-type]
    origins = {} if raw is None else _file_origins(data, f"file {path}")
    problems = _duplicate_problems(data)
    env_values, env_origins, messages = _env_values(env)
    layers = [(env_values, {k: f"env {v}" for k, v in env_origins.items()})]
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    settable = [k for k in LEAVES if k != "memory.path"]
    unknown = sorted((k for k in flags if k not in settable), key=str)
    messages += [f"override {json.dumps(str(k))} is not a setting: use one of {', '.join(settable)}" for k in unknown]
    layers.append(({k: v for k, v in flags.items() if k not in unknown}, {k: "flag" for k in flags}))
    for values, labels in layers:
        for key, value in values.items():
            if isinstance(data, Mapping):
                data = _set_leaf(data, key, value)
            for block in _parents(key):
                origins.setdefault(block, labels[key])  # a block the env or a flag created names its source
            origins[key] = labels[key]
    found, flat = _problems(data)
    for problem in problems + found:
        named = [origins[k].split(" ", 1)[-1] for k in problem.keys if origins.get(k, "").startswith(("env ", "flag"))]
        messages.append(f"{', '.join(dict.fromkeys(named))}: {problem.message}" if named else problem.message)
    if messages:
        where = str(path) if raw is not None else f"the environment and flags (no {CONFIG_FILE} in use)"
        error = InvalidConfig(f"invalid config in {where}:\n" + "\n".join(messages))
        error.problems, error.path = tuple(messages), path  # type: ignore[attr-defined]
        raise error
    memory, tools, used = _resolve(flat)
    index = _resolve_index(flat, vault_path, env, used)
    return Config(memory, tools, None if vault_path is None else Path(vault_path), _source_lines(used, origins), index)


def _resolve_index(flat: dict[str, Any], vault_path: Path | None, env: Mapping[str, str], used: dict) -> IndexConfig:
    """The index block; the DSN from the environment wins over the file's (which has no password)."""
    backend = flat.get("index.backend", "local")
    if backend == "local":
        return IndexConfig()
    folder = "" if vault_path is None else Path(vault_path).resolve().name.lower()
    name = flat.get("index.name") or folder
    used["index.backend"], used["index.name"] = backend, name
    bounds = {key: flat[key] for key in ("index.poolSize", "index.timeoutSeconds", "index.pooler") if key in flat}
    used.update(bounds)
    return IndexConfig(backend, name, env.get(INDEX_DSN_ENV) or flat.get("index.dsn", ""),
                       bounds.get("index.poolSize", DEFAULT_INDEX_POOL_SIZE),
                       bounds.get("index.timeoutSeconds", DEFAULT_INDEX_TIMEOUT_SECONDS),
                       env.get(INDEX_READ_DSN_ENV) or flat.get("index.readDsn", ""),
                       bounds.get("index.pooler", ""),
                       env.get(INDEX_SESSION_DSN_ENV) or flat.get("index.sessionDsn", ""))  # fmt: skip


def server_bounds(env: Mapping[str, str]) -> IndexConfig:
    """The index server's bounds for a process that has no vault (a connected client: `--remote`,
    `MemoryStore.connect`), from MEMVAULT_INDEX_POOL_SIZE and MEMVAULT_INDEX_TIMEOUT_SECONDS, and its
    read DSN (MEMVAULT_INDEX_READ_DSN), as an index block to pass to `IndexConfig.server(..., like=)`;
    InvalidConfig naming the variable."""
    values, origins, messages = _env_values({var: env[var] for var in _BOUND_VARS if var in env})
    found: list = []
    _check_index(values, found)
    messages += [f"{', '.join(origins[k] for k in problem.keys)}: {problem.message}" for problem in found]
    if messages:
        raise InvalidConfig("invalid index server bounds in the environment:\n" + "\n".join(messages))
    return IndexConfig(pool_size=values.get("index.poolSize", DEFAULT_INDEX_POOL_SIZE),
                       timeout_seconds=values.get("index.timeoutSeconds", DEFAULT_INDEX_TIMEOUT_SECONDS),
                       read_dsn=env.get(INDEX_READ_DSN_ENV, ""), pooler=values.get("index.pooler", ""),
                       session_dsn=env.get(INDEX_SESSION_DSN_ENV, ""))  # fmt: skip


_BOUND_VARS = ("MEMVAULT_INDEX_POOL_SIZE", "MEMVAULT_INDEX_TIMEOUT_SECONDS", "MEMVAULT_INDEX_POOLER")


# --- writing ----------------------------------------------------------------------------------


def index_block(backend: str, name: str) -> dict | None:
    """The `index` block `memvault init --index BACKEND` writes; None for the vault's own `.index/`."""
    return None if backend == "local" else {"backend": backend, "name": name}


def default_config_data(mode: str = "journal", time_zone: str = "UTC", index: dict | None = None) -> dict:
    """What `memvault init` writes: builtin (offline) embeddings for journal/bujo, a local chat model for bujo,
    and `index` ({"backend": "postgres", "name": …}) when the index lives on a server."""
    memory: dict[str, Any] = {"mode": mode, "writeMode": "append-host-summary", "timeZone": time_zone}
    if mode in ("journal", "bujo"):
        builtin = EMBEDDING_PROVIDERS["builtin"]
        memory["embeddings"] = {"provider": "builtin", "model": builtin.model, "dim": builtin.dim}
    if mode == "bujo":
        memory["llm"] = {
            "provider": "ollama", "model": "qwen3:8b", "endpoint": LLM_PROVIDERS["ollama"],
            "timeoutMs": DEFAULT_LLM_TIMEOUT_MS,
        }  # fmt: skip
    memory["recallTool"] = {"enabled": True}
    memory["rememberTool"] = {"enabled": True}
    data = {"memory": memory, "tools": {"deniedTools": []}}
    if index is not None:
        data["index"] = dict(index)
    problems = validate_config_data(data)
    if problems:
        raise InvalidConfig("cannot write a default config:\n" + "\n".join(problems))
    return data


def _ordered(value: Any, prefix: str | None) -> Any:
    if isinstance(value, Mapping):
        order = OBJECTS.get(prefix, ()) if prefix is not None else ()
        names = [n for n in order if n in value] + sorted(n for n in value if n not in order)
        child = (lambda n: f"{prefix}.{n}" if prefix else n) if prefix is not None else (lambda n: None)
        return {n: _ordered(value[n], child(n)) for n in names}
    if isinstance(value, (list, tuple)):
        return [_ordered(item, None) for item in value]
    return value


def render_config(data: dict) -> bytes:
    """Deterministic config bytes for clean git diffs.

    Keys follow the documented order (`OBJECTS`: memory then tools; within a block, the order the
    docs list them); keys outside the schema come after, sorted. Two-space indent, UTF-8, LF,
    one trailing newline.
    """
    text = json.dumps(_ordered(data, ""), indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")
