"""Every rule of a valid `memvault.json`, with its message: `validate_config_data(data)` lists
every problem at once, each naming the dotted key, what is wrong, and the fix.

What the keys, types and values are is `vault/config_schema.py`; `vault/config.py` reads files and
the environment and builds the frozen `Config` from what passes here.
"""

from __future__ import annotations

import difflib
import json
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from memvault.vault.config_schema import (
    DEFAULT_EMBEDDING_PROVIDER,
    DEFAULT_LLM_TIMEOUT_MS,
    DEFAULT_RERANK_CANDIDATES,
    DEFAULT_RERANK_TIMEOUT_MS,
    EMBEDDING_PROVIDERS,
    INDEX_BACKENDS,
    INDEX_DSN_ENV,
    INDEX_NAME_RE,
    INDEX_POOLERS,
    INDEX_READ_DSN_ENV,
    INDEX_SESSION_DSN_ENV,
    LEAVES,
    LLM_PROVIDERS,
    MAX_EMBEDDING_DIM,
    MAX_INDEX_POOL_SIZE,
    MAX_INDEX_TIMEOUT_SECONDS,
    MAX_LLM_TIMEOUT_MS,
    MAX_RERANK_CANDIDATES,
    MAX_RERANK_TIMEOUT_MS,
    MODES,
    OBJECT_EXAMPLES,
    OBJECTS,
    RERANK_FORMATS,
    RERANK_PROVIDERS,
    RUNTIME_CHOICES,
    RUNTIME_LIMIT_RANGE,
    RUNTIME_RANGES,
    SYSTEM_ROLES,
    VAULT_PATH_ENV,
    WRITE_MODES,
    EmbeddingProvider,
)
from memvault.vault.layout import CONFIG_FILE

_SECRET_KEY_NAMES = {"apikey", "api_key", "key", "token", "secret", "password", "authorization"}
_ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")
_MAX_TEXT = 256


# --- validation -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Problem:
    message: str
    keys: tuple[str, ...]  # the dotted keys involved, so the loader can name an env var or flag


class _HugeNumber:
    """An integer literal too long to be any setting; kept out of int() (CPython caps digit strings)."""

    def __init__(self, digits: str) -> None:
        self.digits = len(digits.lstrip("-"))


def _show(value: Any) -> str:
    """A short, escaped rendering of a value for a message; secrets and long text are not echoed."""
    if isinstance(value, str):
        from memvault.vault.credentials import find_credential  # its 37 patterns: a message being written only

        if find_credential(value):
            return "(a value that looks like a secret, not shown)"
        shown = value if len(value) <= 60 else value[:60] + "..."
        return json.dumps(shown)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value) if len(repr(value)) <= 30 else "a number with too many digits"
    return ""


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), ((list, tuple), "array"),
               (Mapping, "object"))  # fmt: skip


def _got(value: Any) -> str:
    if isinstance(value, _HugeNumber):
        return f"an integer with {value.digits} digits"
    if value is None:
        return "null"
    kind = next((name for types, name in _JSON_TYPES if isinstance(value, types)), type(value).__name__)
    return f"{kind} {_show(value)}".rstrip()


_EXPECTED = {str: "a string", int: "an integer", bool: "true or false", list: "a list of strings"}


def _has_type(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)


def _show_key(name: Any) -> str:
    text = str(name)
    return text if re.fullmatch(r"[A-Za-z0-9_-]{1,40}", text) else json.dumps(text[:40])


def _unknown_key(prefix: str, name: Any) -> _Problem:
    key = f"{prefix}.{_show_key(name)}" if prefix else _show_key(name)
    allowed = OBJECTS[prefix]
    keyed = ("memory.llm", "memory.embeddings", "memory.extraEmbeddings", "memory.rerank")
    if prefix in keyed and str(name).lower() in _SECRET_KEY_NAMES:
        return _Problem(
            f"{key} is not a known key: never put a key in the config file; put it in an environment variable"
            f" and set {prefix}.apiKeyEnv to that variable's name",
            (key,),
        )
    near = [a for a in allowed if a.lower() == str(name).lower()] or difflib.get_close_matches(str(name), allowed, 1)
    hint = f' (did you mean "{near[0]}"?)' if near else ""
    where = f" in {prefix}" if prefix else " at the top level"
    return _Problem(f"{key} is not a known key{hint}: the keys allowed{where} are {', '.join(allowed)}", (key,))


def _walk(prefix: str, block: Mapping, problems: list[_Problem], flat: dict[str, Any]) -> None:
    """Check key names and types along the schema; record every value that has the right type."""
    for name, value in block.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if not isinstance(name, str) or name not in OBJECTS[prefix]:
            problems.append(_unknown_key(prefix, name))
        elif key in OBJECTS:
            if isinstance(value, Mapping):
                flat[key] = value
                _walk(key, value, problems, flat)
            else:
                example = json.dumps(OBJECT_EXAMPLES[key])
                message = f"{key} must be an object (got {_got(value)}): write it like {example}"
                problems.append(_Problem(message, (key,)))
        else:
            kind, example = LEAVES[key]
            if _has_type(value, kind):
                flat[key] = value
            elif isinstance(value, _HugeNumber):
                problems.append(
                    _Problem(f"{key} is {_got(value)}, far outside any valid value: write it like {example}", (key,))
                )
            else:
                fix = " without quotes" if isinstance(value, str) and kind in (int, bool) else ""
                message = f"{key} must be {_EXPECTED[kind]} (got {_got(value)}): write it like {json.dumps(example)}"
                problems.append(_Problem(message + fix, (key,)))


@lru_cache(maxsize=1)
def _iana_zones() -> frozenset[str]:
    # "localtime" and "Factory" are files in the zone database, not zones: they would guess the host's zone
    return frozenset(zoneinfo.available_timezones()) - {"localtime", "Factory", "posixrules"}


def is_time_zone(name: str) -> bool:
    """A valid IANA zone name, spelled exactly (the same on every platform)."""
    zones = _iana_zones()
    if zones:
        return name in zones
    try:  # no zone list on this machine: fall back to loading it
        zoneinfo.ZoneInfo(name)
        return True
    except (ValueError, KeyError, OSError):
        return False


def _text_problem(key: str, value: str) -> str | None:
    if not value.strip():
        return f"{key} is empty: set it like {json.dumps(LEAVES[key][1])}"
    if value != value.strip() or len(value) > _MAX_TEXT or any(ord(c) < 32 or c == "\x7f" for c in value):
        return (
            f"{key} {_show(value)} has surrounding spaces, control characters or more than {_MAX_TEXT}"
            f" characters: set it like {json.dumps(LEAVES[key][1])}"
        )
    return None


def _endpoint_problem(key: str, value: str, example: str) -> str | None:
    block = key.rsplit(".", 1)[0]
    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        parts, port_ok = None, False
    if parts is not None and "@" in parts.netloc:
        return (
            f"{key} carries credentials in the URL (not shown): remove them, put the key in an environment"
            f" variable and set {block}.apiKeyEnv to that variable's name"
        )
    if (
        parts is None
        or not port_ok
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.query
        or parts.fragment
        or len(value) > 2048
        or any(c.isspace() or ord(c) < 32 for c in value)
    ):
        return (
            f"{key} {_show(value)} is not an http(s) URL without query or fragment: set it like {json.dumps(example)}"
        )
    return None


def _api_key_env_problem(key: str, value: str) -> str | None:
    from memvault.vault.credentials import find_credential  # a config naming an API key only

    if _ENV_NAME_RE.fullmatch(value) and not find_credential(value):
        return None
    return (
        f'{key} must be the UPPER_CASE name of an environment variable holding the key, like "OPENAI_API_KEY"'
        " (the value given is not shown): never put the key itself in the config file"
    )


def _check_embeddings(flat: dict[str, Any], problems: list[_Problem], prefix: str = "memory.embeddings") -> None:
    """memory.embeddings, or (with `prefix`) memory.extraEmbeddings: the same fields and rules."""
    block = flat.get(prefix)
    if block is None:
        return
    extra = prefix != "memory.embeddings"
    if not block:
        example = (
            '{"provider": "e5-small"} (pip install \'memvault[e5]\')'
            if extra
            else '{"provider": "builtin"} (offline, 256-d)'
        )
        problems.append(
            _Problem(f"{prefix} is empty: give at least one field, e.g. {example}, or remove the block", (prefix,))
        )
        return
    if extra and f"{prefix}.provider" not in flat:
        if not any(p.keys[0] == f"{prefix}.provider" for p in problems):  # a wrong type is already reported
            problems.append(
                _Problem(
                    f'{prefix}.provider is required: set it like "e5-small" (the second list\'s'
                    " model, fused beside memory.embeddings)",
                    (f"{prefix}.provider", prefix),
                )
            )
        return
    name = flat.get(f"{prefix}.provider", DEFAULT_EMBEDDING_PROVIDER)
    provider = EMBEDDING_PROVIDERS.get(name)
    if provider is None:
        if f"{prefix}.provider" in flat:
            choices = ", ".join(f'"{p}"' for p in EMBEDDING_PROVIDERS)
            problems.append(
                _Problem(
                    f"{prefix}.provider {_show(name)} is not supported: use one of {choices}", (f"{prefix}.provider",)
                )
            )
        return
    _check_model_and_dim(flat, problems, prefix, name, provider)
    _check_provider_fields(flat, problems, prefix, name, provider)
    if extra:
        _check_extra_differs(flat, problems)


def _check_model_and_dim(
    flat: dict[str, Any], problems: list[_Problem], prefix: str, name: str, provider: EmbeddingProvider
) -> None:
    """An embeddings block's model and dim against its (known) provider."""
    both = (f"{prefix}.provider",)
    model, dim = flat.get(f"{prefix}.model"), flat.get(f"{prefix}.dim")
    if isinstance(model, str) and (message := _text_problem(f"{prefix}.model", model)):
        problems.append(_Problem(message, (f"{prefix}.model",)))
    elif isinstance(model, str) and provider.fixed and model != provider.model:
        message = (
            f'{prefix}.model {_show(model)} is not available for provider "{name}", which ships only'
            f' "{provider.model}": remove model or set it to "{provider.model}"'
        )
        problems.append(_Problem(message, (f"{prefix}.model", *both)))
    if isinstance(dim, int) and provider.fixed and dim != provider.dim:
        problems.append(
            _Problem(
                f'{prefix}.dim {dim} does not match provider "{name}" (its model "{provider.model}"'
                f" always produces {provider.dim}): remove dim or set it to {provider.dim}",
                (f"{prefix}.dim", *both),
            )
        )
    elif isinstance(dim, int) and not 1 <= dim <= MAX_EMBEDDING_DIM:
        problems.append(
            _Problem(
                f"{prefix}.dim must be between 1 and {MAX_EMBEDDING_DIM} (got {dim}):"
                " set it to the model's output dimension",
                (f"{prefix}.dim",),
            )
        )


def _check_provider_fields(
    flat: dict[str, Any], problems: list[_Problem], prefix: str, name: str, provider: EmbeddingProvider
) -> None:
    """An embeddings block's endpoint and apiKeyEnv: unused in-process, else checked as given."""
    both = (f"{prefix}.provider",)
    for field in ("endpoint", "apiKeyEnv"):
        key, value = f"{prefix}.{field}", flat.get(f"{prefix}.{field}")
        if not isinstance(value, str):
            continue
        if provider.fixed:
            message = f'{key} is not used by provider "{name}" (it runs in-process): remove {field}'
        elif field == "endpoint":
            message = _endpoint_problem(key, value, provider.endpoint or "")
        else:
            message = _api_key_env_problem(key, value)
        if message:
            problems.append(_Problem(message, (key, *both)))


def _check_extra_differs(flat: dict[str, Any], problems: list[_Problem]) -> None:
    """The extra list must come from another model: the same vectors twice would only double one list."""
    first = flat.get("memory.embeddings.provider", DEFAULT_EMBEDDING_PROVIDER)
    second = flat["memory.extraEmbeddings.provider"]
    default = lambda name: EMBEDDING_PROVIDERS[name].model if name in EMBEDDING_PROVIDERS else None  # noqa: E731
    same_model = flat.get("memory.embeddings.model", default(first)) == flat.get(
        "memory.extraEmbeddings.model", default(second)
    )
    if "memory.embeddings" in flat and first == second and same_model:
        problems.append(
            _Problem(
                f'memory.extraEmbeddings names the same model as memory.embeddings ("{first}"):'
                " the extra list must come"
                ' from another model, e.g. {"provider": "e5-small"} beside the builtin one, or remove the block',
                ("memory.extraEmbeddings.provider", "memory.embeddings.provider"),
            )
        )


def _check_llm(flat: dict[str, Any], problems: list[_Problem]) -> None:
    if "memory.llm" not in flat:
        return
    name = flat.get("memory.llm.provider", "ollama")
    if name not in LLM_PROVIDERS:
        problems.append(
            _Problem(
                f'memory.llm.provider {_show(name)} is not supported: use "ollama" or "openai"',
                ("memory.llm.provider",),
            )
        )
    model = flat.get("memory.llm.model")
    if model is None:
        if not any(p.keys[0] == "memory.llm.model" for p in problems):  # a wrong type is already reported
            problems.append(
                _Problem(
                    'memory.llm.model is required: set it to the chat model\'s name, e.g. "qwen3:8b"'
                    " (or set MEMVAULT_MEMORY_LLM_MODEL)",
                    ("memory.llm.model", "memory.llm"),
                )
            )
    elif message := _text_problem("memory.llm.model", model):
        problems.append(_Problem(message, ("memory.llm.model",)))
    endpoint = flat.get("memory.llm.endpoint")
    if isinstance(endpoint, str):
        example = LLM_PROVIDERS.get(name, LLM_PROVIDERS["ollama"])
        if message := _endpoint_problem("memory.llm.endpoint", endpoint, example):
            problems.append(_Problem(message, ("memory.llm.endpoint",)))
    timeout = flat.get("memory.llm.timeoutMs")
    if isinstance(timeout, int) and not 1 <= timeout <= MAX_LLM_TIMEOUT_MS:
        problems.append(
            _Problem(
                f"memory.llm.timeoutMs must be between 1 and {MAX_LLM_TIMEOUT_MS} milliseconds (got {timeout}):"
                f" the default is {DEFAULT_LLM_TIMEOUT_MS}",
                ("memory.llm.timeoutMs",),
            )
        )
    key_env = flat.get("memory.llm.apiKeyEnv")
    if isinstance(key_env, str) and (message := _api_key_env_problem("memory.llm.apiKeyEnv", key_env)):
        problems.append(_Problem(message, ("memory.llm.apiKeyEnv",)))
    role = flat.get("memory.llm.systemRole")
    if isinstance(role, str) and role not in SYSTEM_ROLES:
        problems.append(
            _Problem(
                f'memory.llm.systemRole {_show(role)} is not supported: use "auto" (the default), "system", or "fold"'
                " (for chat templates that drop the system message, e.g. Gemma's)",
                ("memory.llm.systemRole",),
            )
        )


def _check_rerank(flat: dict[str, Any], problems: list[_Problem]) -> None:
    if "memory.rerank" not in flat:
        return

    def add(key: str, message: str) -> None:
        problems.append(_Problem(message, (key,)))

    provider = flat.get("memory.rerank.provider", "http")
    if provider not in RERANK_PROVIDERS:
        add(
            "memory.rerank.provider",
            f'memory.rerank.provider {_show(provider)} is not supported: use "http" (a'
            " rerank server: llama.cpp, text-embeddings-inference, Infinity, vLLM or a hosted API)",
        )
    for field in ("endpoint", "model"):
        key = f"memory.rerank.{field}"
        value = flat.get(key)
        if value is None:
            if not any(p.keys[0] == key for p in problems):  # a wrong type is already reported
                add(key, f"{key} is required: set it like {json.dumps(LEAVES[key][1])}")
        elif message := (
            _endpoint_problem(key, value, LEAVES[key][1]) if field == "endpoint" else _text_problem(key, value)
        ):
            add(key, message)
    form = flat.get("memory.rerank.format")
    if isinstance(form, str) and form not in RERANK_FORMATS:
        add(
            "memory.rerank.format",
            f'memory.rerank.format {_show(form)} is not supported: use "cohere" (Jina/'
            'Cohere shape: llama.cpp, Infinity, vLLM, hosted APIs; the default) or "tei" (text-embeddings-inference)',
        )
    for key, most, default, unit in (
        ("memory.rerank.timeoutMs", MAX_RERANK_TIMEOUT_MS, DEFAULT_RERANK_TIMEOUT_MS, " milliseconds"),
        ("memory.rerank.candidates", MAX_RERANK_CANDIDATES, DEFAULT_RERANK_CANDIDATES, ""),
    ):
        value = flat.get(key)
        if isinstance(value, int) and not 1 <= value <= most:
            add(key, f"{key} must be between 1 and {most}{unit} (got {value}): the default is {default}")
    key_env = flat.get("memory.rerank.apiKeyEnv")
    if isinstance(key_env, str) and (message := _api_key_env_problem("memory.rerank.apiKeyEnv", key_env)):
        add("memory.rerank.apiKeyEnv", message)


def _check_scalars(flat: dict[str, Any], problems: list[_Problem]) -> None:
    _check_memory_scalars(flat, problems)
    _check_runtime_scalars(flat, problems)
    _check_tool_names(flat, problems)


def _check_memory_scalars(flat: dict[str, Any], problems: list[_Problem]) -> None:
    """memory.mode, writeMode, path and timeZone."""

    def add(key: str, message: str, *more: str) -> None:
        problems.append(_Problem(message, (key, *more)))

    mode, write_mode = flat.get("memory.mode"), flat.get("memory.writeMode")
    if mode is not None and mode not in MODES:
        add("memory.mode", f'memory.mode {_show(mode)} is not a tier: set it to "lite", "journal" or "bujo"')
    if write_mode is not None and write_mode not in WRITE_MODES:
        add(
            "memory.writeMode",
            f'memory.writeMode {_show(write_mode)} is not a write mode: set it to "disabled",'
            ' "append-host-summary" or "capture"',
        )
    path = flat.get("memory.path")
    if path is not None and path != ".":
        add(
            "memory.path",
            f"memory.path {_show(path)} is not supported: the vault is the folder that holds {CONFIG_FILE},"
            f" found by --vault, {VAULT_PATH_ENV} or the nearest enclosing vault; remove memory.path"
            ' or set it to "."',
        )
    zone = flat.get("memory.timeZone")
    if zone is not None and not is_time_zone(zone):
        add(
            "memory.timeZone",
            f'memory.timeZone {_show(zone)} is not an IANA time zone: use a name like "Europe/Amsterdam",'
            ' "America/New_York" or "UTC"',
        )


def _check_runtime_scalars(flat: dict[str, Any], problems: list[_Problem]) -> None:
    """memory.runtime's limits, choices and ranges."""

    def add(key: str, message: str, *more: str) -> None:
        problems.append(_Problem(message, (key, *more)))

    lo, hi = RUNTIME_LIMIT_RANGE
    for field in ("userLimit", "memoryLimit"):
        key = f"memory.runtime.{field}"
        value = flat.get(key)
        if value is not None and not lo <= value <= hi:
            add(key, f"{key} must be between {lo} and {hi} bytes (got {value}): the default is {LEAVES[key][1]}")
    for name, choices in RUNTIME_CHOICES.items():
        key = f"memory.runtime.{name}"
        value = flat.get(key)
        if value is not None and value not in choices:
            add(key, f"{key} {_show(value)} is not one of {', '.join(json.dumps(c) for c in choices)}:"
                     f" the default is {json.dumps(choices[0])}")  # fmt: skip
    for key, (lo, hi) in RUNTIME_RANGES.items():
        value = flat.get(key)
        if value is not None and not lo <= value <= hi:
            add(key, f"{key} must be between {lo} and {hi} (got {value}): the default is {LEAVES[key][1]}")


def _check_tool_names(flat: dict[str, Any], problems: list[_Problem]) -> None:
    """tools.hostTools' names and the tools.allowedTools / deniedTools lists."""

    def add(key: str, message: str, *more: str) -> None:
        problems.append(_Problem(message, (key, *more)))

    for name in OBJECTS["tools.hostTools"]:
        key = f"tools.hostTools.{name}"
        value = flat.get(key)
        if value is not None and not _TOOL_NAME_RE.fullmatch(value):
            add(
                key,
                f"{key} must be the name of a tool the host offers, like {json.dumps(LEAVES[key][1])} (got"
                f" {_got(value)}): use letters, digits and _ . : / - only, or remove it when the host has none",
            )
    for key in ("tools.allowedTools", "tools.deniedTools"):
        for index, item in enumerate(flat.get(key, ())):
            if not isinstance(item, str) or not _TOOL_NAME_RE.fullmatch(item):
                add(
                    key,
                    f'{key}[{index}] must be a tool name like "MemoryJournal" (got {_got(item)}):'
                    " use letters, digits and _ . : / - only",
                )


def _check_tiers(flat: dict[str, Any], problems: list[_Problem]) -> None:
    mode = flat.get("memory.mode", "lite")
    reported = {problem.keys[0] for problem in problems}  # a block of the wrong type is not also "missing"
    if mode in ("journal", "bujo") and "memory.embeddings" not in flat and "memory.embeddings" not in reported:
        problems.append(
            _Problem(
                f'memory.embeddings is required for memory.mode "{mode}": add "embeddings": {{"provider": "builtin"}}'
                " (offline, 256-d) or another provider's block",
                ("memory.embeddings", "memory.mode"),
            )
        )
    if mode == "bujo" and "memory.llm" not in flat and "memory.llm" not in reported:
        problems.append(
            _Problem(
                'memory.llm is required for memory.mode "bujo" (capture curates with a chat model): add'
                ' "llm": {"provider": "ollama", "model": "qwen3:8b"}',
                ("memory.llm", "memory.mode"),
            )
        )
    if flat.get("memory.writeMode") == "capture" and mode in MODES and mode != "bujo":
        problems.append(
            _Problem(
                f'memory.writeMode "capture" requires memory.mode "bujo" (got "{mode}"): set memory.mode to "bujo"'
                ' or choose writeMode "append-host-summary"',
                ("memory.writeMode", "memory.mode"),
            )
        )


_DSN_PASSWORD_RE = re.compile(r"(^|\s)password\s*=", re.IGNORECASE)


def dsn_has_password(dsn: str) -> bool:
    """Whether a libpq DSN (key=value or URI form) carries a password."""
    if "://" in dsn:
        try:
            return bool(urlsplit(dsn.strip()).password)
        except ValueError:
            return False
    return bool(_DSN_PASSWORD_RE.search(dsn))


def _check_index(flat: dict[str, Any], problems: list[_Problem]) -> None:
    backend = flat.get("index.backend", "local")
    if isinstance(backend, str) and backend not in INDEX_BACKENDS:
        problems.append(
            _Problem(
                f"index.backend must be one of {', '.join(map(json.dumps, INDEX_BACKENDS))} "
                f'(got {_show(backend)}): use "postgres" for a team\'s server',
                ("index.backend",),
            )
        )
    if backend == "postgres" and "memory.extraEmbeddings" in flat:  # else silently one list, not two
        problems.append(
            _Problem(
                'memory.extraEmbeddings is not served by an index server (index.backend "postgres" keeps one '
                'vector per memory): remove the block, or keep this vault\'s index local (index.backend "local")',
                ("memory.extraEmbeddings", "index.backend"),
            )
        )
    name = flat.get("index.name")
    if isinstance(name, str) and not INDEX_NAME_RE.fullmatch(name):
        problems.append(
            _Problem(
                f"index.name {_show(name)} is not a vault name for the server: use 1-40 lower-case "
                'letters, digits, "-" or "_", starting with a letter or digit (e.g. "team-notes")',
                ("index.name",),
            )
        )
    for key, most, fix in (
        ("index.poolSize", MAX_INDEX_POOL_SIZE, "connections one process holds to the server at most; keep "
         "agents × poolSize under the server's max_connections"),
        ("index.timeoutSeconds", MAX_INDEX_TIMEOUT_SECONDS, "seconds any statement or wait on the server may take"),
    ):  # fmt: skip
        value = flat.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= most:
            problems.append(_Problem(f"{key} must be between 1 and {most} (got {value}): it is the {fix}; "
                                     f"the default is {LEAVES[key][1]}", (key,)))  # fmt: skip
    pooler = flat.get("index.pooler")
    if isinstance(pooler, str) and pooler not in INDEX_POOLERS:
        problems.append(_Problem('index.pooler must be "transaction" (PgBouncer or another pooler in transaction '
                                 'mode in front of the server) or "" (none, or one in session mode); '
                                 f"got {_show(pooler)}", ("index.pooler",)))  # fmt: skip
    for key, env in (("index.dsn", INDEX_DSN_ENV), ("index.readDsn", INDEX_READ_DSN_ENV),
                     ("index.sessionDsn", INDEX_SESSION_DSN_ENV)):  # fmt: skip
        dsn = flat.get(key)
        if isinstance(dsn, str) and dsn_has_password(dsn):
            problems.append(
                _Problem(
                    f"{key} carries a password, and {CONFIG_FILE} goes to git: remove it and set "
                    f"{env}, or keep the password in ~/.pgpass (or a libpq service in "
                    '~/.pg_service.conf) and write "service=NAME" here',
                    (key,),
                )
            )


def _problems(data: object) -> tuple[list[_Problem], dict[str, Any]]:
    problems: list[_Problem] = []
    flat: dict[str, Any] = {}
    if not isinstance(data, Mapping):
        problems.append(
            _Problem(
                f'the config must be a JSON object (got {_got(data)}): write it like {{"memory": {{"mode": "lite"}}}}',
                ("",),
            )
        )
        return problems, flat
    _walk("", data, problems, flat)
    _check_scalars(flat, problems)
    _check_embeddings(flat, problems)
    _check_embeddings(flat, problems, "memory.extraEmbeddings")
    _check_llm(flat, problems)
    _check_rerank(flat, problems)
    _check_tiers(flat, problems)
    _check_index(flat, problems)
    return problems, flat


def validate_config_data(data: object) -> list[str]:
    """Every problem in parsed config data (the file's shape), one message each; [] when valid."""
    return [problem.message for problem in _problems(data)[0]]
