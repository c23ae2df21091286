"""A hostile-input corpus over every way in: argv and stdin of the CLI (real subprocesses),
intake JSON, the config file, the environment and MCP tool calls (the SDK's own client).

Each case must end with a clear answer and no traceback: exit 0 with an answer, or exit 1/2
with a message naming the problem (a JSON error object on stdout when `--json` was asked, and
always for `admit`, whose stdout a host parses). No secret from the input is ever repeated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.readonly_helpers import memvault_here

MEMVAULT = str(Path(sys.executable).parent / "memvault")
PEM = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAz9" + "Qk3" * 20 + "\n-----END RSA PRIVATE KEY-----"
SLACK_HOOK = "https://hooks.slack.com/services/" + "T0AB12CDE/B0FG34HIJ/" + "aB3dE5gH7jK9mN1pQ3sT5vX7"
TWILIO = "SK" + "0123456789abcdef" * 2
SECRETS = ("MIIEowIBAAKCAQEA", "aB3dE5gH7jK9mN1pQ3sT5vX7", "0123456789abcdef0123456789abcdef")
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile") / "v"
    # the set-up runs in this process (memvault_here); the commands under test each run as a process
    assert memvault_here(root.parent, "init", str(root), "--mode", "lite", "--time-zone", "UTC") == 0
    (root / "daily" / "2026-11-30.md").write_text("# 2026-11-30\n\n- 09:00 Priya lives in Rotterdam. ^m-priya\n")
    assert memvault_here(root, "rebuild") == 0
    return root


def run(args: list, stdin: bytes | None = None, env: dict | None = None, cwd: Path | None = None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    environment.update(env or {})
    return subprocess.run(
        [MEMVAULT, *args], input=stdin, capture_output=True, env=environment, timeout=180, cwd=str(cwd) if cwd else None
    )


def check(done, *, codes=(1, 2), json_out: bool = False, says: tuple[str, ...] = ()):
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")  # both must be valid UTF-8
    assert "Traceback" not in err and "Traceback" not in out, err
    assert done.returncode in codes, (done.returncode, out, err)
    said = out + err
    assert not [secret for secret in SECRETS if secret in said], said
    if done.returncode != 0:
        assert said.strip(), "a failure must say why"
    if json_out:
        body = json.loads(out)
        assert isinstance(body, dict)
        if done.returncode != 0:
            message = (body.get("error") or {}).get("message") or body.get("message")
            assert message, body
    for words in says:
        assert words.lower() in said.lower(), (words, said)
    return out, err


B = os.fsencode  # argv as bytes: invalid UTF-8 reaches the process exactly as given

ARGV_CASES = {
    "invalid utf-8 remember": ([b"remember", b"bad \xff\xfe"], {}, ("utf-8",)),
    "invalid utf-8 remember --json": ([b"remember", b"--json", b"bad \xff\xfe"], {"json_out": True}, ("utf-8",)),
    "invalid utf-8 search": ([b"search", b"\xc3\x28 x"], {}, ("utf-8",)),
    "invalid utf-8 option value": ([b"search", b"--limit", b"\xff", b"x"], {}, ("utf-8",)),
    "pem as an option": (["remember", PEM], {}, ("private key",)),
    "pem as an option --json": (["remember", "--json", PEM], {"json_out": True}, ("private key",)),
    "pem as a runtime option": (["runtime", "add", "user", PEM], {}, ("private key",)),
    "pem after --": (["remember", "--", PEM], {}, ("private key",)),
    "slack webhook": (["remember", f"alerts go to {SLACK_HOOK}"], {}, ("webhook",)),
    "slack webhook --json": (["remember", "--json", f"alerts go to {SLACK_HOOK}"], {"json_out": True}, ("webhook",)),
    "twilio key": (["remember", f"twilio {TWILIO}"], {}, ("twilio",)),
    "secret as a limit": (["search", "--limit", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "x"], {}, ("stripe",)),
    "empty fact": (["remember", ""], {}, ("empty",)),
    "whitespace fact": (["remember", "   \t "], {}, ("empty",)),
    "control characters": (["remember", "a\x01b\x7fc"], {}, ("control",)),
    "huge fact": (["remember", "x" * 100_000], {}, ("limit",)),
    "unknown option": (["search", "--bogus", "x"], {}, ("no such option",)),
    "unknown command": (["frobnicate"], {}, ("no such command",)),
    "limit zero": (["search", "--limit", "0", "x"], {}, ()),
    "limit huge": (["search", "--limit", "99999999999999999999999", "x"], {}, ()),
    "limit text --json": (["search", "--json", "--limit", "abc", "x"], {"json_out": True}, ()),
    "bad mode": (["search", "--mode", "bogus", "x"], {}, ()),
    "query syntax": (["search", 'AND OR NOT ((( "unbalanced field:value^2 ~ *'], {"codes": (0,)}, ()),
    "empty query": (["search", ""], {"codes": (0, 1, 2)}, ()),
    "bidi query": (["search", "\u202e\u2066 Priya \u2069"], {"codes": (0,)}, ()),
    "long query": (["search", "word " * 20_000], {"codes": (0, 1, 2)}, ()),
    "auto crash question": (
        ["search", "--json", "--mode", "auto", "Where is Priya living?"],
        {"codes": (0,), "json_out": True},
        (),
    ),
    "bad journal date": (["journal", "2026-13-01", "2026-13-02", "--tz", "UTC"], {}, ()),
    "bad journal zone": (["journal", "2026-11-01", "2026-11-02", "--tz", "Not/AZone"], {}, ("zone",)),
    "journal too wide --json": (
        ["journal", "--json", "2026-01-01", "2027-01-01", "--tz", "UTC"],
        {"json_out": True},
        (),
    ),
    "forged cursor": (["journal", "--cursor", "mj1.forged.cursor"], {}, ()),
    "bad at": (["remember", "--at", "yesterday-ish", "a fact"], {}, ()),
    "runtime bad target": (["runtime", "add", "bogus", "x"], {}, ()),
    "runtime empty": (["runtime", "add", "user", ""], {}, ()),
    "doc traversal title": (["doc", "create", "../../../etc/passwd", "--body", "x"], {"codes": (0, 1, 2)}, ()),
    "doc empty title": (["doc", "create", "", "--body", "x"], {}, ()),
    "export to missing folder": (["export", "/nonexistent/folder/backup.tar.gz"], {}, ()),
}


@pytest.mark.parametrize("case", sorted(ARGV_CASES))
def test_hostile_argv(vault, case):
    args, expect, says = ARGV_CASES[case]
    prefix = [b"--vault", B(str(vault))] if isinstance(args[0], bytes) else ["--vault", str(vault)]
    check(run([*prefix, *args]), says=says, **expect)


STDIN_CASES = {
    "empty": b"",
    "not utf-8": b"\xff\xfe{}",
    "deeply nested": DEEP.encode(),
    "deeply nested field": ('{"runId": "r-deep", "answer": ' + DEEP + "}").encode(),
    "array": b'[{"runId": "r", "answer": "a"}]',
    "duplicate keys": b'{"runId": "r", "runId": "s", "answer": "a"}',
    "nan": b'{"runId": "r", "answer": NaN}',
    "missing run id": b'{"answer": "a"}',
    "number answer": b'{"runId": "r", "answer": 5}',
    "trailing garbage": b'{"runId": "r", "answer": "a"} {"x": 1}',
    "unknown field": b'{"runId": "r", "answer": "a", "evil": true}',
    "oversized": b'{"runId": "r", "answer": "' + b"x" * (17 * 1024 * 1024) + b'"}',  # the cap is 16 MiB
    "lone surrogate": b'{"runId": "r", "answer": "\\udcff"}',
    "credential": json.dumps({"runId": "r-cred", "answer": f"the hook is {SLACK_HOOK}"}).encode(),
    "bad trigger": b'{"runId": "r", "answer": "a", "trigger": "root"}',
    "bad completedAt": b'{"runId": "r", "answer": "a", "completedAt": "tomorrow"}',
}


@pytest.mark.parametrize("case", sorted(STDIN_CASES))
def test_hostile_admit_stdin(vault, case):
    out, _ = check(run(["--vault", str(vault), "admit"], stdin=STDIN_CASES[case]), codes=(1,), json_out=True)
    assert json.loads(out)["status"] == "failed"


CONFIG_CASES = {
    "not json": b"{ memory: lite",
    "not utf-8": b'{"memory": {"mode": "\xff"}}',
    "deeply nested": ('{"memory": ' + "[" * 5000 + "]" * 5000 + "}").encode(),
    "unknown mode": b'{"memory": {"mode": "bogus", "timeZone": "UTC"}}',
    "bad zone": b'{"memory": {"mode": "lite", "timeZone": "Not/AZone"}}',
    "wrong type": b'{"memory": {"mode": 5}}',
    "top-level array": b"[]",
    "empty": b"",
    "huge": b'{"memory": {"mode": "lite", "x": "' + b"y" * (4 * 1024 * 1024) + b'"}}',
}


# local only: it opens no index on either engine: each command refuses the config before any index is
# opened (the copy leaves the module vault's index behind, and the test checks that none was made)
@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
@pytest.mark.parametrize("command", [["search", "x"], ["validate"], ["remember", "--json", "a fact"]])
def test_hostile_config(vault, tmp_path, case, command):
    broken = tmp_path / "v"
    shutil.copytree(vault, broken, ignore=shutil.ignore_patterns(".index"))
    (broken / "memvault.json").write_bytes(CONFIG_CASES[case])
    check(run(["--vault", str(broken), *command]), json_out="--json" in command, says=("memvault.json",))
    assert not (broken / ".index").exists(), "a refused config opened an index"


ENV_CASES = {
    "path not utf-8": {"MEMVAULT_MEMORY_PATH": "/tmp/\udcff-missing"},
    "path missing": {"MEMVAULT_MEMORY_PATH": "/nonexistent/vault"},
    "path is a file": {"MEMVAULT_MEMORY_PATH": "/etc/hostname"},
    "bad mode": {"MEMVAULT_MEMORY_MODE": "bogus"},
    "bad zone": {"MEMVAULT_MEMORY_TIME_ZONE": "Mars/Olympus"},
    "bad dim": {"MEMVAULT_MEMORY_EMBEDDINGS_DIM": "-1"},
    "bad bool": {"MEMVAULT_MEMORY_RECALL_TOOL_ENABLED": "maybe"},
}


@pytest.mark.parametrize("case", sorted(ENV_CASES))
def test_hostile_environment(vault, case):
    env = {key: value for key, value in ENV_CASES[case].items()}
    args = ["search", "x"] if "MEMVAULT_MEMORY_PATH" in env else ["--vault", str(vault), "search", "x"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    environment.update({k: os.fsdecode(os.fsencode(v)) for k, v in env.items()})
    done = subprocess.run(
        [MEMVAULT, *args],
        capture_output=True,
        env={k: os.fsencode(v) for k, v in environment.items()},
        timeout=180,
        cwd="/",
    )
    check(done, codes=(1, 2))


def test_hostile_mcp_calls(vault, tmp_path):
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=MEMVAULT, args=["--vault", str(vault), "mcp"], cwd=str(vault.parent), env={"PYTHONUNBUFFERED": "1"}
    )
    calls = [
        ("MemoryRecall", {"query": "Where is Priya living?", "mode": "auto"}),
        ("MemoryRecall", {"query": {"nested": [[[[[]]]]]}}),
        ("MemoryRecall", {"query": "x", "limit": 10**30}),
        ("MemoryRecall", {"query": "x", "limit": -1}),
        ("MemoryRecall", {"query": "x" * 100_000}),
        ("MemoryJournal", {"fromDate": "2026-11-30", "throughDate": "2026-11-30", "timeZone": "../../etc/passwd"}),
        ("MemoryJournal", {"cursor": "A" * 100_000}),
        ("MemoryJournal", {"fromDate": ["2026"], "throughDate": None, "timeZone": 3}),
        ("Remember", {"text": f"alerts go to {SLACK_HOOK}"}),
        ("Remember", {"text": f"twilio {TWILIO}"}),
        ("Remember", {"text": PEM}),
        ("Remember", {"text": "\x00\x01\x02"}),
        ("Remember", {"text": "a" * 1_000_000}),
        ("Remember", {"text": "ok", "extra": "field"}),
        ("NoSuchTool", {}),
    ]
    errlog = tmp_path / "server-stderr.txt"

    async def session():
        answers = []
        with open(errlog, "w") as log:
            async with stdio_client(params, errlog=log) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=120) as client:
                    await client.initialize()
                    for name, arguments in calls:
                        try:
                            answers.append((name, await client.call_tool(name, arguments)))
                        except Exception as exc:  # noqa: BLE001 - a protocol-level refusal is an answer too
                            answers.append((name, exc))
        return answers

    answers = anyio.run(session)
    stderr = errlog.read_text("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    assert len(answers) == len(calls)
    for (name, arguments), (_, answer) in zip(calls, answers, strict=True):
        if isinstance(answer, Exception):
            assert str(answer), (name, arguments)
            continue
        text = "".join(getattr(block, "text", "") for block in answer.content)
        assert text.strip(), (name, arguments)
        assert not [secret for secret in SECRETS if secret in text], text
        if name == "Remember" or name == "NoSuchTool":
            assert answer.is_error, (name, text)
    assert "Rotterdam" not in "".join(  # nothing hostile was stored
        (vault / "daily" / name).read_text() for name in os.listdir(vault / "daily")
    ).replace("Priya lives in Rotterdam.", "")
