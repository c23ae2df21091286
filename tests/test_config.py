"""The vault config: every rule, precedence flag > env > file > default, hostile files, round trips."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.vault.config import (
    CONFIG_FILE,
    ENV_VARS,
    LEAVES,
    VAULT_PATH_ENV,
    Config,
    EmbeddingsConfig,
    LlmConfig,
    ToolsConfig,
    default_config_data,
    load_config,
    render_config,
    validate_config_data,
)
from memvault.vault.errors import InvalidConfig

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = {"provider": "builtin"}
LLM = {"provider": "ollama", "model": "qwen3:8b"}
EXAMPLE = {
    "memory": {
        "mode": "journal",
        "writeMode": "append-host-summary",
        "timeZone": "Europe/Amsterdam",
        "embeddings": {"provider": "builtin", "model": "wordllama-l2-supercat", "dim": 256},
        "llm": {"provider": "ollama", "model": "qwen3:8b", "endpoint": "http://localhost:11434", "timeoutMs": 60000},
        "recallTool": {"enabled": True},
        "rememberTool": {"enabled": True},
    },
    "tools": {"allowedTools": ["MemoryRecall", "MemoryJournal", "Remember"], "deniedTools": []},
}


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    root.mkdir()
    return root


def write(vault: Path, data: object) -> Path:
    path = vault / CONFIG_FILE
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def load(vault: Path, data: object, env: dict[str, str] | None = None, overrides: dict | None = None) -> Config:
    write(vault, data)
    return load_config(vault, env or {}, overrides)


def memory(**fields: object) -> dict:
    return {"memory": fields}


def problems(data: object) -> list[str]:
    return validate_config_data(data)


def load_error(vault: Path | None, env: dict[str, str] | None = None, overrides: dict | None = None) -> str:
    with pytest.raises(InvalidConfig) as info:
        load_config(vault, env or {}, overrides)
    return str(info.value)


# --- defaults and the documented example --------------------------------------------------------


def test_defaults_without_file_or_env() -> None:
    config = load_config(None, {})
    assert config.memory.mode == "lite"
    assert config.memory.write_mode == "append-host-summary"
    assert config.memory.time_zone == "UTC"
    assert (config.memory.embeddings, config.memory.llm) == (None, None)
    assert config.memory.recall_tool_enabled and config.memory.remember_tool_enabled
    assert (config.memory.runtime_user_limit, config.memory.runtime_memory_limit) == (4096, 10240)
    assert config.tools == ToolsConfig(None, ())
    assert config.vault_path is None


def test_vault_without_config_file_uses_defaults(vault: Path) -> None:
    config = load_config(vault, {})
    assert config.memory.mode == "lite"
    assert config.vault_path == vault
    assert 'memory.mode = "lite"  (default)' in config.source


def test_documented_example_loads(vault: Path) -> None:
    config = load(vault, EXAMPLE)
    assert config.memory.mode == "journal"
    assert config.memory.time_zone == "Europe/Amsterdam"
    assert str(config.memory.zone) == "Europe/Amsterdam"
    assert config.memory.embeddings == EmbeddingsConfig("builtin", "wordllama-l2-supercat", 256, None, None)
    # journal never captures with it, but runtime-memory compaction may use a configured model
    assert config.memory.llm is not None and config.memory.llm.model == "qwen3:8b"
    assert config.tools == ToolsConfig(("MemoryRecall", "MemoryJournal", "Remember"), ())


def test_config_is_frozen(vault: Path) -> None:
    config = load(vault, EXAMPLE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.memory.mode = "bujo"  # type: ignore[misc]


def test_library_never_reads_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMVAULT_MEMORY_MODE", "bujo")
    assert load_config(None, {}).memory.mode == "lite"


# --- precedence ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_zone", "env_zone", "flag_zone", "expected", "origin"),
    [
        (None, None, None, "UTC", "(default)"),
        ("Europe/Amsterdam", None, None, "Europe/Amsterdam", "(file "),
        ("Europe/Amsterdam", "America/New_York", None, "America/New_York", "(env MEMVAULT_MEMORY_TIME_ZONE)"),
        ("Europe/Amsterdam", "America/New_York", "Asia/Tokyo", "Asia/Tokyo", "(flag)"),
        (None, None, "Asia/Tokyo", "Asia/Tokyo", "(flag)"),
    ],
)
def test_precedence_flag_env_file_default(vault, file_zone, env_zone, flag_zone, expected, origin) -> None:
    data = memory() if file_zone is None else memory(timeZone=file_zone)
    env = {} if env_zone is None else {"MEMVAULT_MEMORY_TIME_ZONE": env_zone}
    config = load(vault, data, env, {"memory.timeZone": flag_zone})
    assert config.memory.time_zone == expected
    line = next(line for line in config.source.splitlines() if line.startswith("memory.timeZone"))
    assert line.startswith(f'memory.timeZone = "{expected}"  {origin}')


def test_precedence_across_layers_for_write_mode(vault: Path) -> None:
    data = memory(mode="bujo", writeMode="disabled", embeddings=BUILTIN, llm=LLM)
    assert load(vault, data).memory.write_mode == "disabled"
    env = {"MEMVAULT_MEMORY_WRITE_MODE": "append-host-summary"}
    assert load(vault, data, env).memory.write_mode == "append-host-summary"
    assert load(vault, data, env, {"memory.writeMode": "capture"}).memory.write_mode == "capture"


def test_none_override_is_ignored(vault: Path) -> None:
    config = load(vault, memory(mode="lite"), {}, {"memory.mode": None, "memory.timeZone": None})
    assert (config.memory.mode, config.memory.time_zone) == ("lite", "UTC")


def test_unknown_override_key_is_refused(vault: Path) -> None:
    write(vault, memory())
    message = load_error(vault, {}, {"memory.colour": "blue"})
    expected = 'override "memory.colour" is not a setting: use one of memory.mode, memory.writeMode, memory.timeZone,'
    assert expected in message
    assert "memory.path" not in message  # the vault's location is not a setting


def test_flag_value_errors_say_they_came_from_a_flag(vault: Path) -> None:
    write(vault, memory())
    message = load_error(vault, {}, {"memory.mode": "notes"})
    assert 'flag: memory.mode "notes" is not a tier: set it to "lite", "journal" or "bujo"' in message.splitlines()


# --- environment --------------------------------------------------------------------------------


def test_env_vars_are_exactly_the_documented_set() -> None:
    assert dict(ENV_VARS) == {
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
    assert VAULT_PATH_ENV == "MEMVAULT_MEMORY_PATH"
    assert all(key in LEAVES for key in ENV_VARS.values())


def test_vault_path_env_is_not_read_by_load_config(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    write(other, memory(mode="journal"))  # would fail: journal without embeddings
    assert load_config(None, {VAULT_PATH_ENV: str(other)}).memory.mode == "lite"


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("TRUE", True), ("1", True), ("false", False),
                                               ("False", False), ("0", False)])  # fmt: skip
def test_env_booleans(raw: str, expected: bool) -> None:
    config = load_config(None, {"MEMVAULT_MEMORY_RECALL_TOOL_ENABLED": raw})
    assert config.memory.recall_tool_enabled is expected


@pytest.mark.parametrize("raw", ["yes", "on", " true", "2", "truee", "t"])
def test_env_bad_boolean_names_the_variable(raw: str) -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_RECALL_TOOL_ENABLED": raw})
    assert message.splitlines()[1].startswith("MEMVAULT_MEMORY_RECALL_TOOL_ENABLED must be true, false, 1 or 0 (got ")


def test_env_bad_boolean_exact_message() -> None:
    assert load_error(None, {"MEMVAULT_MEMORY_RECALL_TOOL_ENABLED": "yes"}) == (
        "invalid config in the environment and flags (no memvault.json in use):\n"
        'MEMVAULT_MEMORY_RECALL_TOOL_ENABLED must be true, false, 1 or 0 (got "yes"): it sets memory.recallTool.enabled'
    )


@pytest.mark.parametrize("raw", ["abc", "-5", "1_000", "1e3", " 5", "\u0663", "12345678901", "60000.0"])
def test_env_bad_integer_names_the_variable(raw: str) -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_LLM_TIMEOUT_MS": raw})
    assert "MEMVAULT_MEMORY_LLM_TIMEOUT_MS must be a whole number like 60000 (got " in message
    assert message.endswith("): it sets memory.llm.timeoutMs")


def test_env_empty_value_names_the_variable() -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_MODE": ""})
    expected = 'MEMVAULT_MEMORY_MODE is set but empty: unset it or give it a value like "journal"'
    assert message.splitlines()[1] == expected


def test_env_value_failing_a_rule_names_the_variable() -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_MODE": "notes"})
    assert message.splitlines()[1] == (
        'MEMVAULT_MEMORY_MODE: memory.mode "notes" is not a tier: set it to "lite", "journal" or "bujo"'
    )


def test_env_embeddings_field_creates_the_block() -> None:
    config = load_config(None, {"MEMVAULT_MEMORY_MODE": "journal", "MEMVAULT_MEMORY_EMBEDDINGS_DIM": "1024"})
    assert config.memory.embeddings == EmbeddingsConfig("ollama", "nomic-embed-text:v1.5", 1024,
                                                        "http://localhost:11434")  # fmt: skip
    assert "memory.embeddings.dim = 1024  (env MEMVAULT_MEMORY_EMBEDDINGS_DIM)" in config.source


def test_env_configures_a_full_bujo_tier(vault: Path) -> None:
    env = {
        "MEMVAULT_MEMORY_MODE": "bujo",
        "MEMVAULT_MEMORY_WRITE_MODE": "capture",
        "MEMVAULT_MEMORY_EMBEDDINGS_PROVIDER": "lmstudio",
        "MEMVAULT_MEMORY_EMBEDDINGS_MODEL": "text-embedding-bge-m3",
        "MEMVAULT_MEMORY_LLM_MODEL": "llama3.1:8b",
        "MEMVAULT_MEMORY_LLM_ENDPOINT": "http://gpu-box:11434",
        "MEMVAULT_MEMORY_LLM_TIMEOUT_MS": "120000",
    }
    config = load(vault, memory(timeZone="Europe/Amsterdam"), env)
    assert config.memory.write_mode == "capture"
    assert config.memory.embeddings == EmbeddingsConfig("lmstudio", "text-embedding-bge-m3", 768,
                                                        "http://localhost:1234/v1")  # fmt: skip
    assert config.memory.llm == LlmConfig("ollama", "llama3.1:8b", "http://gpu-box:11434", 120000, None)


def test_env_llm_field_without_model_names_the_variable() -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_LLM_ENDPOINT": "http://localhost:11434"})
    assert message.splitlines()[1] == (
        "MEMVAULT_MEMORY_LLM_ENDPOINT: memory.llm.model is required: set it to the chat model's name,"
        ' e.g. "qwen3:8b" (or set MEMVAULT_MEMORY_LLM_MODEL)'
    )


def test_env_provider_switch_conflicting_with_file_dim_names_the_variable(vault: Path) -> None:
    write(vault, memory(mode="journal", embeddings={"dim": 768}))
    message = load_error(vault, {"MEMVAULT_MEMORY_EMBEDDINGS_PROVIDER": "builtin"})
    assert message.splitlines()[1] == (
        'MEMVAULT_MEMORY_EMBEDDINGS_PROVIDER: memory.embeddings.dim 768 does not match provider "builtin"'
        ' (its model "wordllama-l2-supercat" always produces 256): remove dim or set it to 256'
    )


def test_env_endpoint_with_credentials_is_refused_without_echo() -> None:
    message = load_error(None, {"MEMVAULT_MEMORY_LLM_MODEL": "m", "MEMVAULT_MEMORY_LLM_ENDPOINT":
                                "https://bob:hunter2secret@llm.example.com"})  # fmt: skip
    assert "MEMVAULT_MEMORY_LLM_ENDPOINT: memory.llm.endpoint carries credentials in the URL (not shown)" in message
    assert "hunter2secret" not in message


# --- mode and write mode -------------------------------------------------------------------------


def test_unknown_mode_message() -> None:
    assert problems(memory(mode="notes")) == [
        'memory.mode "notes" is not a tier: set it to "lite", "journal" or "bujo"'
    ]


def test_unknown_write_mode_message() -> None:
    assert problems(memory(writeMode="always")) == [
        'memory.writeMode "always" is not a write mode: set it to "disabled", "append-host-summary" or "capture"'
    ]


@pytest.mark.parametrize("mode", ["lite", "journal"])
def test_capture_requires_bujo(mode: str) -> None:
    data = memory(mode=mode, writeMode="capture", embeddings=BUILTIN)
    assert problems(data) == [
        f'memory.writeMode "capture" requires memory.mode "bujo" (got "{mode}"): set memory.mode to "bujo"'
        ' or choose writeMode "append-host-summary"'
    ]


def test_capture_default_mode_is_lite_and_refused() -> None:
    assert problems(memory(writeMode="capture")) == [
        'memory.writeMode "capture" requires memory.mode "bujo" (got "lite"): set memory.mode to "bujo"'
        ' or choose writeMode "append-host-summary"'
    ]


def test_capture_with_bujo_loads(vault: Path) -> None:
    config = load(vault, memory(mode="bujo", writeMode="capture", embeddings=BUILTIN, llm=LLM))
    assert (config.memory.mode, config.memory.write_mode) == ("bujo", "capture")


@pytest.mark.parametrize("write_mode", ["disabled", "append-host-summary"])
def test_non_capture_write_modes_work_on_every_tier(vault: Path, write_mode: str) -> None:
    assert load(vault, memory(mode="lite", writeMode=write_mode)).memory.write_mode == write_mode


# --- embeddings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["journal", "bujo"])
def test_journal_and_bujo_require_an_embeddings_block(mode: str) -> None:
    data = memory(mode=mode, llm=LLM)
    assert problems(data) == [
        f'memory.embeddings is required for memory.mode "{mode}": add "embeddings": {{"provider": "builtin"}}'
        " (offline, 256-d) or another provider's block"
    ]


def test_empty_embeddings_block_is_refused() -> None:
    assert problems(memory(mode="journal", embeddings={})) == [
        'memory.embeddings is empty: give at least one field, e.g. {"provider": "builtin"} (offline, 256-d),'
        " or remove the block"
    ]


def test_block_with_only_dim_is_valid_and_defaults_to_ollama(vault: Path) -> None:
    config = load(vault, memory(mode="journal", embeddings={"dim": 1024}))
    assert config.memory.embeddings == EmbeddingsConfig("ollama", "nomic-embed-text:v1.5", 1024,
                                                        "http://localhost:11434")  # fmt: skip


@pytest.mark.parametrize(
    ("provider", "model", "dim", "endpoint"),
    [
        ("ollama", "nomic-embed-text:v1.5", 768, "http://localhost:11434"),
        ("lmstudio", "text-embedding-nomic-embed-text-v1.5", 768, "http://localhost:1234/v1"),
        ("openai", "text-embedding-3-small", 768, "https://api.openai.com/v1"),
        ("builtin", "wordllama-l2-supercat", 256, None),
        ("e5-small", "multilingual-e5-small-q4", 384, None),
    ],
)
def test_embedding_defaults_by_provider(vault: Path, provider: str, model: str, dim: int, endpoint) -> None:
    config = load(vault, memory(mode="journal", embeddings={"provider": provider}))
    assert config.memory.embeddings == EmbeddingsConfig(provider, model, dim, endpoint, None)


def test_unknown_embedding_provider_message() -> None:
    assert problems(memory(mode="journal", embeddings={"provider": "cohere"})) == [
        'memory.embeddings.provider "cohere" is not supported: use one of "builtin", "e5-small", "ollama",'
        ' "lmstudio", "openai"'
    ]


@pytest.mark.parametrize(("provider", "fixed"), [("builtin", 256), ("e5-small", 384)])
def test_fixed_dim_providers_refuse_another_dim(provider: str, fixed: int) -> None:
    model = "wordllama-l2-supercat" if provider == "builtin" else "multilingual-e5-small-q4"
    assert problems(memory(mode="journal", embeddings={"provider": provider, "dim": 768})) == [
        f'memory.embeddings.dim 768 does not match provider "{provider}" (its model "{model}" always produces'
        f" {fixed}): remove dim or set it to {fixed}"
    ]
    assert problems(memory(mode="journal", embeddings={"provider": provider, "dim": fixed})) == []


def test_fixed_providers_refuse_another_model_endpoint_or_key() -> None:
    data = memory(mode="journal", embeddings={"provider": "builtin", "model": "nomic-embed-text:v1.5",
                                              "endpoint": "http://x:1", "apiKeyEnv": "KEY"})  # fmt: skip
    assert problems(data) == [
        'memory.embeddings.model "nomic-embed-text:v1.5" is not available for provider "builtin", which ships'
        ' only "wordllama-l2-supercat": remove model or set it to "wordllama-l2-supercat"',
        'memory.embeddings.endpoint is not used by provider "builtin" (it runs in-process): remove endpoint',
        'memory.embeddings.apiKeyEnv is not used by provider "builtin" (it runs in-process): remove apiKeyEnv',
    ]


@pytest.mark.parametrize("dim", [0, -1, 8193])
def test_dim_range(dim: int) -> None:
    assert problems(memory(mode="journal", embeddings={"dim": dim})) == [
        f"memory.embeddings.dim must be between 1 and 8192 (got {dim}): set it to the model's output dimension"
    ]


def test_openai_embeddings_with_key_env(vault: Path) -> None:
    data = memory(mode="journal", embeddings={"provider": "openai", "apiKeyEnv": "OPENAI_API_KEY"})
    assert load(vault, data).memory.embeddings.api_key_env == "OPENAI_API_KEY"


def test_lite_keeps_a_valid_embeddings_block_but_does_not_use_it(vault: Path) -> None:
    config = load(vault, memory(mode="lite", embeddings={"provider": "ollama"}))
    assert config.memory.embeddings is None
    assert "memory.embeddings" not in config.source


def test_lite_still_validates_a_kept_embeddings_block() -> None:
    assert problems(memory(mode="lite", embeddings={"provider": "builtin", "dim": 300})) != []


# --- llm -----------------------------------------------------------------------------------------


def test_bujo_requires_llm_block() -> None:
    assert problems(memory(mode="bujo", embeddings=BUILTIN)) == [
        'memory.llm is required for memory.mode "bujo" (capture curates with a chat model): add'
        ' "llm": {"provider": "ollama", "model": "qwen3:8b"}'
    ]


def test_llm_defaults(vault: Path) -> None:
    config = load(vault, memory(mode="bujo", embeddings=BUILTIN, llm={"model": "qwen3:8b"}))
    assert config.memory.llm == LlmConfig("ollama", "qwen3:8b", "http://localhost:11434", 60000, None)


def test_openai_llm_defaults(vault: Path) -> None:
    llm = {"provider": "openai", "model": "gpt-4.1-mini", "apiKeyEnv": "OPENAI_API_KEY"}
    config = load(vault, memory(mode="bujo", embeddings=BUILTIN, llm=llm))
    assert config.memory.llm == LlmConfig("openai", "gpt-4.1-mini", "https://api.openai.com/v1", 60000,
                                          "OPENAI_API_KEY")  # fmt: skip


def test_llm_model_required_message() -> None:
    assert problems(memory(mode="bujo", embeddings=BUILTIN, llm={"provider": "ollama"})) == [
        'memory.llm.model is required: set it to the chat model\'s name, e.g. "qwen3:8b"'
        " (or set MEMVAULT_MEMORY_LLM_MODEL)"
    ]


def test_llm_unknown_provider_message() -> None:
    data = memory(mode="bujo", embeddings=BUILTIN, llm={"provider": "agent-host", "model": "x"})
    assert problems(data) == ['memory.llm.provider "agent-host" is not supported: use "ollama" or "openai"']


@pytest.mark.parametrize("timeout", [0, -5, 3_600_001])
def test_llm_timeout_range(timeout: int) -> None:
    data = memory(mode="bujo", embeddings=BUILTIN, llm={**LLM, "timeoutMs": timeout})
    assert problems(data) == [
        f"memory.llm.timeoutMs must be between 1 and 3600000 milliseconds (got {timeout}): the default is 60000"
    ]


def test_llm_timeout_at_the_maximum_is_valid(vault: Path) -> None:
    config = load(vault, memory(mode="bujo", embeddings=BUILTIN, llm={**LLM, "timeoutMs": 3_600_000}))
    assert config.memory.llm.timeout_ms == 3_600_000


@pytest.mark.parametrize("value", [60000.0, True, "60000"])
def test_llm_timeout_wrong_types(value: object) -> None:
    [message] = problems(memory(mode="bujo", embeddings=BUILTIN, llm={**LLM, "timeoutMs": value}))
    assert message.startswith("memory.llm.timeoutMs must be an integer (got ")


def test_llm_timeout_string_says_without_quotes() -> None:
    assert problems(memory(llm={**LLM, "timeoutMs": "60000"})) == [
        'memory.llm.timeoutMs must be an integer (got string "60000"): write it like 60000 without quotes'
    ]


@pytest.mark.parametrize(
    "name", ["sk-" + "a1B2c3D4" * 6, "openai_api_key", "MY KEY", "1KEY", "", "AKIA" + "IOSFODNN7QWERTYU"]
)
def test_api_key_env_must_be_a_variable_name_and_is_never_echoed(name: str) -> None:
    [message] = problems(memory(mode="bujo", embeddings=BUILTIN, llm={**LLM, "apiKeyEnv": name}))
    assert message == (
        "memory.llm.apiKeyEnv must be the UPPER_CASE name of an environment variable holding the key, like"
        ' "OPENAI_API_KEY" (the value given is not shown): never put the key itself in the config file'
    )


@pytest.mark.parametrize("block", ["llm", "embeddings"])
@pytest.mark.parametrize("name", ["apiKey", "api_key", "token"])
def test_a_key_in_the_file_is_refused_with_the_env_hint(block: str, name: str) -> None:
    data = memory(mode="bujo", embeddings={"provider": "openai"}, llm=dict(LLM))
    data["memory"][block][name] = "whatever"
    assert problems(data) == [
        f"memory.{block}.{name} is not a known key: never put a key in the config file; put it in an environment"
        f" variable and set memory.{block}.apiKeyEnv to that variable's name"
    ]


@pytest.mark.parametrize(
    "endpoint", ["ftp://host", "localhost:11434", "http://", "http://host:99999", "http://h/x?q=1", "http://h/#f",
                 "http://h o"],
)  # fmt: skip
def test_bad_endpoints(endpoint: str) -> None:
    [message] = problems(memory(mode="bujo", embeddings=BUILTIN, llm={**LLM, "endpoint": endpoint}))
    assert message == (
        f"memory.llm.endpoint {json.dumps(endpoint)} is not an http(s) URL without query or fragment:"
        ' set it like "http://localhost:11434"'
    )


def test_endpoint_with_credentials_is_refused_without_echo() -> None:
    endpoint = "https://u:pa55word@api.example.com/v1"
    data = memory(mode="journal", embeddings={"provider": "openai", "endpoint": endpoint})
    [message] = problems(data)
    assert message == (
        "memory.embeddings.endpoint carries credentials in the URL (not shown): remove them, put the key in an"
        " environment variable and set memory.embeddings.apiKeyEnv to that variable's name"
    )


def test_llm_block_is_available_outside_bujo(vault: Path) -> None:
    """Only bujo requires it; in lite/journal a configured model serves runtime compaction."""
    assert load(vault, memory(mode="journal", embeddings=BUILTIN, llm=LLM)).memory.llm.model == LLM["model"]
    assert load(vault, memory(mode="lite")).memory.llm is None


# --- time zone, tools toggles, path, runtime limits --------------------------------------------


@pytest.mark.parametrize("zone", ["Europe/Amsterdam", "UTC", "America/Argentina/Buenos_Aires", "Etc/GMT+2"])
def test_valid_time_zones(vault: Path, zone: str) -> None:
    assert load(vault, memory(timeZone=zone)).memory.time_zone == zone


@pytest.mark.parametrize("zone", ["Mars/Olympus", "europe/amsterdam", "localtime", "Factory", "../../etc/passwd",
                                  "/usr/share/zoneinfo/UTC", "", "CEST"])  # fmt: skip
def test_invalid_time_zones(zone: str) -> None:
    assert problems(memory(timeZone=zone)) == [
        f'memory.timeZone {json.dumps(zone)} is not an IANA time zone: use a name like "Europe/Amsterdam",'
        ' "America/New_York" or "UTC"'
    ]


@pytest.mark.parametrize("key", ["recallTool", "rememberTool"])
def test_tool_toggles(vault: Path, key: str) -> None:
    config = load(vault, memory(**{key: {"enabled": False}}))
    attr = "recall_tool_enabled" if key == "recallTool" else "remember_tool_enabled"
    assert getattr(config.memory, attr) is False
    assert getattr(load(vault, memory()).memory, attr) is True


@pytest.mark.parametrize("value", ["true", 1, None])
def test_booleans_are_never_coerced_in_the_file(value: object) -> None:
    [message] = problems(memory(recallTool={"enabled": value}))
    assert message.startswith("memory.recallTool.enabled must be true or false (got ")


def test_string_boolean_exact_message() -> None:
    assert problems(memory(rememberTool={"enabled": "false"})) == [
        'memory.rememberTool.enabled must be true or false (got string "false"): write it like true without quotes'
    ]


def test_path_dot_is_accepted(vault: Path) -> None:
    assert load(vault, memory(path=".")).memory.mode == "lite"


def test_path_elsewhere_is_refused() -> None:
    assert problems(memory(path="./.mono-agent/memory")) == [
        'memory.path "./.mono-agent/memory" is not supported: the vault is the folder that holds memvault.json,'
        " found by --vault, MEMVAULT_MEMORY_PATH or the nearest enclosing vault; remove memory.path or set it"
        ' to "."'
    ]


def test_runtime_limits(vault: Path) -> None:
    config = load(vault, memory(runtime={"userLimit": 8192, "memoryLimit": 20480}))
    assert (config.memory.runtime_user_limit, config.memory.runtime_memory_limit) == (8192, 20480)
    assert problems(memory(runtime={"userLimit": 10})) == [
        "memory.runtime.userLimit must be between 256 and 1048576 bytes (got 10): the default is 4096"
    ]


# --- tool policy ---------------------------------------------------------------------------------


def test_permits_without_allow_list() -> None:
    tools = ToolsConfig(None, ("Shell",))
    assert tools.permits("Remember") and tools.permits("Anything")
    assert not tools.permits("Shell")


def test_permits_with_allow_list_and_deny_wins() -> None:
    tools = ToolsConfig(("Remember", "Shell"), ("Shell",))
    assert tools.permits("Remember")
    assert not tools.permits("MemoryJournal")
    assert not tools.permits("Shell")
    assert not ToolsConfig((), ()).permits("Remember")


def test_tool_policy_for_memory_tools(vault: Path) -> None:
    config = load(vault, {"memory": {}, "tools": {"allowedTools": []}})
    assert config.tool_enabled("MemoryRecall")  # a restrictive allow-list leaves targeted recall available
    assert not config.tool_enabled("MemoryJournal")
    assert not config.tool_enabled("Remember")
    config = load(vault, {"memory": {"recallTool": {"enabled": False}}, "tools": {}})
    assert not config.tool_enabled("MemoryRecall") and not config.tool_enabled("MemoryJournal")
    assert config.tool_enabled("Remember")
    config = load(vault, {"memory": {"rememberTool": {"enabled": False}}})
    assert not config.tool_enabled("Remember") and config.tool_enabled("MemoryJournal")
    config = load(vault, {"tools": {"deniedTools": ["MemoryRecall", "Remember"]}})
    assert not config.tool_enabled("MemoryRecall") and not config.tool_enabled("Remember")
    assert config.tool_enabled("MemoryJournal")


def test_tools_lists_are_checked() -> None:
    assert problems({"tools": {"allowedTools": "Remember"}}) == [
        'tools.allowedTools must be a list of strings (got string "Remember"): write it like'
        ' ["MemoryRecall", "MemoryJournal", "Remember"]'
    ]
    assert problems({"tools": {"deniedTools": ["Remember", 3, ""]}}) == [
        'tools.deniedTools[1] must be a tool name like "MemoryJournal" (got integer 3): use letters, digits and'
        " _ . : / - only",
        'tools.deniedTools[2] must be a tool name like "MemoryJournal" (got string ""): use letters, digits and'
        " _ . : / - only",
    ]


# --- unknown keys and wrong types ----------------------------------------------------------------


def test_unknown_keys_at_every_level() -> None:
    data = {
        "memroy": {},
        "memory": {
            "writemode": "disabled",
            "embeddings": {"provider": "builtin", "size": 1},
            "recallTool": {"on": True},
        },
        "tools": {"allowed": []},
    }
    assert problems(data) == [
        'memroy is not a known key (did you mean "memory"?): the keys allowed at the top level are'
        " memory, tools, index",
        'memory.writemode is not a known key (did you mean "writeMode"?): the keys allowed in memory are mode,'
        " writeMode, path, timeZone, embeddings, extraEmbeddings, llm, rerank, recallTool, rememberTool, runtime",
        "memory.embeddings.size is not a known key: the keys allowed in memory.embeddings are provider, model, dim,"
        " endpoint, apiKeyEnv",
        "memory.recallTool.on is not a known key: the keys allowed in memory.recallTool are enabled",
        'tools.allowed is not a known key (did you mean "allowedTools"?): the keys allowed in tools are'
        " allowedTools, deniedTools, hostTools",
    ]


def test_wrong_block_types() -> None:
    assert problems({"memory": []}) == ['memory must be an object (got array): write it like {"mode": "lite"}']
    assert problems(memory(embeddings="builtin")) == [
        'memory.embeddings must be an object (got string "builtin"): write it like {"provider": "builtin"}'
    ]


def test_a_block_of_the_wrong_type_is_reported_once() -> None:
    assert problems(memory(mode="bujo", embeddings="builtin", llm=["qwen3:8b"])) == [
        'memory.embeddings must be an object (got string "builtin"): write it like {"provider": "builtin"}',
        'memory.llm must be an object (got array): write it like {"provider": "ollama", "model": "qwen3:8b"}',
    ]


@pytest.mark.parametrize(("value", "got"), [("768", 'string "768"'), (768.0, "number 768.0"), (True, "boolean true"),
                                            (None, "null"), ([768], "array")])  # fmt: skip
def test_wrong_leaf_types_name_expected_and_got(value: object, got: str) -> None:
    [message] = problems(memory(mode="journal", embeddings={"dim": value}))
    assert message.startswith(f"memory.embeddings.dim must be an integer (got {got}): write it like 768")


@pytest.mark.parametrize("data", [[], "lite", None, 5, True])
def test_non_object_top_level(data: object) -> None:
    [message] = problems(data)
    assert message.startswith("the config must be a JSON object (got ")
    assert message.endswith('): write it like {"memory": {"mode": "lite"}}')


def test_every_problem_is_listed_at_once(vault: Path) -> None:
    path = write(vault, memory(mode="notes", timeZone="Nowhere", writeMode="x", bogus=1))
    message = load_error(vault)
    lines = message.splitlines()
    assert lines[0] == f"invalid config in {path}:"
    assert len(lines) == 5
    assert lines[1].startswith("memory.bogus is not a known key")


# --- hostile and malformed files ------------------------------------------------------------------


def write_bytes(vault: Path, raw: bytes) -> Path:
    path = vault / CONFIG_FILE
    path.write_bytes(raw)
    return path


def test_malformed_json_names_file_line_and_column(vault: Path) -> None:
    path = write_bytes(vault, b'{\n  "memory": {\n    "mode": "lite",\n  }\n}\n')
    assert load_error(vault) == (
        f"invalid config in {path}:\n"
        "not valid JSON at line 4, column 3: Expecting property name enclosed in double quotes: fix the syntax"
        " there (a trailing comma or a missing quote is the usual cause)"
    )


def test_empty_file_is_malformed(vault: Path) -> None:
    write_bytes(vault, b"")
    assert "not valid JSON at line 1, column 1" in load_error(vault)


def test_oversized_file_is_refused(vault: Path) -> None:
    path = write_bytes(vault, b'{"memory": {}}' + b" " * (1024 * 1024))
    assert load_error(vault) == (
        f"invalid config in {path}:\nthe file is {1024 * 1024 + 14} bytes, over the 1048576-byte limit:"
        " a config is a few hundred bytes; check that memvault.json is the right file"
    )


def test_file_of_exactly_the_limit_is_read(vault: Path) -> None:
    body = b'{"memory": {}}'
    write_bytes(vault, body + b" " * (1024 * 1024 - len(body)))
    assert load_config(vault, {}).memory.mode == "lite"


def test_deeply_nested_file_is_refused(vault: Path) -> None:
    depth = 200_000
    write_bytes(vault, b'{"memory": ' + b"[" * depth + b"]" * depth + b"}")
    message = load_error(vault)
    assert "the file nests objects or arrays too deeply to be a config: rewrite it" in message


def test_moderately_nested_unknown_value_is_just_an_unknown_key(vault: Path) -> None:
    write_bytes(vault, b'{"memory": {"extra": ' + b"[" * 500 + b"]" * 500 + b"}}")
    assert "memory.extra is not a known key" in load_error(vault)


def test_huge_integer_is_refused_without_crashing(vault: Path) -> None:
    write_bytes(vault, b'{"memory": {"mode": "journal", "embeddings": {"dim": 1' + b"0" * 100_000 + b"}}}")
    assert load_error(vault).splitlines()[1] == (
        "memory.embeddings.dim is an integer with 100001 digits, far outside any valid value: write it like 768"
    )


def test_overflowing_float_is_a_type_error(vault: Path) -> None:
    write_bytes(vault, b'{"memory": {"llm": {"model": "m", "timeoutMs": 1e400}}}')
    assert "memory.llm.timeoutMs must be an integer (got number inf)" in load_error(vault)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(vault: Path, constant: bytes) -> None:
    path = write_bytes(vault, b'{"memory": {"runtime": {"userLimit": ' + constant + b"}}}")
    name = constant.decode().lstrip("-")
    assert load_error(vault) in (
        f"invalid config in {path}:\n{constant.decode()} is not a JSON value: write a number",
        f"invalid config in {path}:\n{name} is not a JSON value: write a number",
    )


def test_duplicate_keys_are_refused(vault: Path) -> None:
    write_bytes(vault, b'{"memory": {"mode": "lite", "mode": "bujo"}, "tools": {}, "tools": {}}')
    lines = load_error(vault).splitlines()
    assert "memory.mode is given more than once: keep one (JSON keys must be unique)" in lines
    assert "tools is given more than once: keep one (JSON keys must be unique)" in lines


def test_non_utf8_bytes_are_refused(vault: Path) -> None:
    path = write_bytes(vault, b'{"memory": {"mode": "li\xffte"}}')
    assert load_error(vault) == (
        f"invalid config in {path}:\nthe file is not UTF-8 (byte 0xff at offset 23): save it as UTF-8"
    )


def test_utf8_byte_order_mark_is_tolerated(vault: Path) -> None:
    write_bytes(vault, b"\xef\xbb\xbf" + json.dumps(memory(mode="lite")).encode())
    assert load_config(vault, {}).memory.mode == "lite"


def test_config_path_that_is_a_directory_is_refused(vault: Path) -> None:
    (vault / CONFIG_FILE).mkdir()
    assert "the file is not a regular file: replace it with the JSON config file" in load_error(vault)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_config_path_that_is_a_fifo_is_refused_without_blocking(vault: Path) -> None:
    os.mkfifo(vault / CONFIG_FILE)
    assert "the file is not a regular file" in load_error(vault)


def test_vault_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "notes.txt"
    not_a_folder.write_text("x")
    assert "cannot open the file (Not a directory): make it a readable regular file" in load_error(not_a_folder)


def test_unreadable_file_is_refused(vault: Path) -> None:
    path = write(vault, memory())
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who can read anything")
        assert "cannot open the file (Permission denied)" in load_error(vault)
    finally:
        path.chmod(0o644)


def test_hostile_strings_are_escaped_and_bounded_in_messages() -> None:
    [message] = problems(memory(mode="\x1b[31m" + "x" * 500))
    assert "\x1b" not in message and len(message) < 200


def test_a_secret_in_a_value_is_not_echoed() -> None:
    secret = "sk-" + "a1B2c3D4" * 6
    [message] = problems(memory(mode=secret))
    assert secret not in message
    assert "(a value that looks like a secret, not shown)" in message


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
SCHEMA_KEYS = st.sampled_from(["mode", "writeMode", "timeZone", "embeddings", "llm", "recallTool", "path", "runtime"])


# 100 examples: each draws up to 6 of the 8 schema keys and checks 3 documents of up to 20 leaves
# (300 took ~12 s of the suite's budget on a busy machine)
@settings(max_examples=100, deadline=None)
@given(st.dictionaries(SCHEMA_KEYS, JSON_VALUES, max_size=6), JSON_VALUES)
def test_validation_never_raises_on_arbitrary_json(block: dict, anything: object) -> None:
    for data in ({"memory": block}, anything, {"memory": {"embeddings": anything, "llm": anything}}):
        assert all(isinstance(message, str) and message for message in validate_config_data(data))


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=300) | st.text(alphabet='{}[]":,.-0123456789eEtrufalsnNI memoryd', max_size=80).map(str.encode)
)
def test_arbitrary_file_bytes_load_or_raise_invalid_config(raw: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / CONFIG_FILE).write_bytes(raw)
        try:
            config = load_config(Path(folder), {})
        except InvalidConfig as exc:
            assert str(exc).startswith(f"invalid config in {Path(folder) / CONFIG_FILE}:\n")
        else:
            assert config.memory.mode in ("lite", "journal", "bujo")


# --- init defaults and rendering -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["lite", "journal", "bujo"])
@pytest.mark.parametrize("zone", ["UTC", "Europe/Amsterdam"])
def test_default_config_round_trips_through_load(vault: Path, mode: str, zone: str) -> None:
    raw = render_config(default_config_data(mode, zone))
    write_bytes(vault, raw)
    config = load_config(vault, {})
    assert (config.memory.mode, config.memory.time_zone) == (mode, zone)
    assert config.memory.write_mode == "append-host-summary"
    if mode == "lite":
        assert config.memory.embeddings is None
    else:
        assert config.memory.embeddings == EmbeddingsConfig("builtin", "wordllama-l2-supercat", 256, None)
    assert (config.memory.llm is not None) == (mode == "bujo")
    assert render_config(json.loads(raw)) == raw  # re-rendering what is on disk changes nothing


def test_default_is_journal_with_builtin_embeddings() -> None:
    data = default_config_data()
    assert data["memory"]["mode"] == "journal"
    assert data["memory"]["embeddings"] == {"provider": "builtin", "model": "wordllama-l2-supercat", "dim": 256}
    assert data["memory"]["timeZone"] == "UTC"


def test_default_config_refuses_bad_arguments() -> None:
    with pytest.raises(InvalidConfig, match='memory.mode "notes" is not a tier'):
        default_config_data("notes")
    with pytest.raises(InvalidConfig, match='memory.timeZone "localtime" is not an IANA time zone'):
        default_config_data("lite", "localtime")


def test_render_config_bytes_are_deterministic() -> None:
    raw = render_config(default_config_data("bujo", "Europe/Amsterdam"))
    assert raw.endswith(b"}\n") and not raw.endswith(b"\n\n")
    assert b"\r" not in raw and b"\t" not in raw
    assert raw.startswith(b'{\n  "memory": {\n    "mode": "bujo",\n    "writeMode": "append-host-summary",\n')


def test_render_config_uses_the_documented_order_whatever_the_input_order() -> None:
    shuffled = {
        "tools": {"deniedTools": [], "allowedTools": ["Remember"]},
        "zeta": 1,
        "memory": {"llm": {"timeoutMs": 5, "model": "m", "provider": "ollama"}, "timeZone": "UTC", "mode": "bujo",
                   "custom": {"b": 1, "a": 2}},
    }  # fmt: skip
    rendered = json.loads(render_config(shuffled))
    assert list(rendered) == ["memory", "tools", "zeta"]
    assert list(rendered["memory"]) == ["mode", "timeZone", "llm", "custom"]
    assert list(rendered["memory"]["llm"]) == ["provider", "model", "timeoutMs"]
    assert list(rendered["memory"]["custom"]) == ["a", "b"]
    assert list(rendered["tools"]) == ["allowedTools", "deniedTools"]
    assert render_config(shuffled) == render_config(json.loads(render_config(shuffled)))


def test_render_config_keeps_non_ascii_text_readable() -> None:
    assert "Zürich".encode() in render_config({"note": "Zürich"})


# --- docs and layering ---------------------------------------------------------------------------


def test_configuration_doc_lists_every_env_var_and_key() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for var, key in ENV_VARS.items():
        assert f"| `{var}` | `{key}` |" in doc, var
    assert f"`{VAULT_PATH_ENV}`" in doc
    for key in LEAVES:
        assert f"`{key}`" in doc, key


@pytest.mark.parametrize("module", ["config.py", "credentials.py"])
def test_vault_modules_import_no_upper_layer_or_http(module: str) -> None:
    tree = ast.parse((ROOT / "vault" / module).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    assert not names & {"indexer", "cli", "click", "httpx", "requests", "urllib3", "aiohttp", "http"}


def _doc_blocks(language: str) -> list[str]:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    parts = doc.split("```")
    return [part[len(language) + 1 :] for part in parts[1::2] if part.startswith(language + "\n")]


def test_configuration_doc_examples_are_what_the_code_says() -> None:
    configs = [json.loads(block) for block in _doc_blocks("json") if block.startswith("{")]
    assert len(configs) == 5  # the main example, the refused one, lite, journal, bujo
    refused = next(c for c in configs if "embedings" in c["memory"])
    assert [validate_config_data(c) for c in configs if c is not refused] == [[]] * (len(configs) - 1)
    shown = next(block for block in _doc_blocks("") if block.startswith("invalid config in"))
    assert shown.splitlines()[1:] == validate_config_data(refused)
    assert default_config_data("journal", "Europe/Amsterdam") in configs  # the journal example is init's file
