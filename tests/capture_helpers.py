"""Shared helpers for the capture tests: BuJo capture vaults pointed at a loopback chat model.

`ChatScript` is a loopback handler that answers the two capture prompts the way a model would,
over the real wire format (Ollama `/api/chat` or OpenAI `/v1/chat/completions`): extraction
answers come from `extract(turn_text)`, reconciliation answers from `reconcile(memories)` where
`memories` is the list the prompt offered ({index, text, candidates: [{id, text, date}]}).
Every request is counted by kind, so tests can assert "no model call after the plan".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.capture.prompt import EXTRACTION_SYSTEM, RECONCILIATION_SYSTEM, user_document
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.snapshot import inspect_run
from tests.intake_helpers import Clock
from tests.postgres_helpers import on_test_backend

OLLAMA_PATH, OPENAI_PATH, EMBED_PATH = "/api/chat", "/v1/chat/completions", "/api/embed"
EMBED_DIM = 32


def make_capture_vault(tmp_path: Path, endpoint: str, *, provider: str = "ollama", timeout_ms: int = 5000,
                       name: str = "v", mode: str = "bujo", write_mode: str = "capture",
                       embed_endpoint: str | None = None) -> Path:  # fmt: skip
    """A capture vault. With `embed_endpoint`, embeddings come from a loopback `hash_embeddings`
    server (no model load: the crash matrix's subprocesses start fast); else the builtin model."""
    data = default_config_data(mode=mode, time_zone="Europe/Amsterdam")
    data["memory"]["writeMode"] = write_mode
    if embed_endpoint is not None and mode != "lite":
        data["memory"]["embeddings"] = {
            "provider": "ollama",
            "model": "hash-embed",
            "dim": EMBED_DIM,
            "endpoint": embed_endpoint,
        }
    if mode == "bujo":
        data["memory"]["llm"] = {
            "provider": provider,
            "model": "capture-model",
            "endpoint": endpoint,
            "timeoutMs": timeout_ms,
        }
        if provider == "openai":
            data["memory"]["llm"]["apiKeyEnv"] = "MEMVAULT_TEST_KEY"
    root = tmp_path / name
    init_vault(root, render_config(data))
    # a both_backends test's postgres run: the index on the server, one vault name per folder
    return on_test_backend(root.resolve(), f"test-{name.lower().replace('.', '-')}")


def hash_embeddings(body: Any) -> tuple[int, dict]:
    """An Ollama /api/embed answer: each text as a normalised bag of hashed lowercase words."""
    import hashlib
    import re

    rows = []
    for text in body["input"]:
        vector = [0.0] * EMBED_DIM
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % EMBED_DIM] += 1.0
        norm = sum(v * v for v in vector) ** 0.5 or 1.0
        rows.append([v / norm for v in vector] if any(vector) else [1.0] + [0.0] * (EMBED_DIM - 1))
    return 200, {"model": "hash-embed", "embeddings": rows}


def extraction(*memories: dict, entities: list | None = None, relations: list | None = None) -> str:
    return json.dumps({"memories": list(memories), "entities": entities or [], "relations": relations or []})


def memory(text: str, salience: float = 0.7, refs: list[str] | None = None) -> dict:
    return {"text": text, "salience": salience, "entities": refs or []}


def entity(ref: str, name: str, kind: str = "project") -> dict:
    return {"ref": ref, "name": name, "type": kind}


def ollama_reply(content: str) -> tuple[int, dict]:
    return 200, {"model": "capture-model", "message": {"role": "assistant", "content": content}, "done": True}


def openai_reply(content: str) -> tuple[int, dict]:
    return 200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}


class ChatScript:
    """A loopback handler answering extraction/reconciliation prompts from two callables."""

    def __init__(
        self, extract: Callable[[str], Any], reconcile: Callable[[list], Any] | None = None, *, provider: str = "ollama"
    ):
        self.extract, self.reconcile = extract, reconcile
        self.provider = provider
        self.calls = {"extraction": 0, "reconciliation": 0, "other": 0}
        self.offered: list[list] = []
        self.requests: list[Any] = []  # every request body, in arrival order
        self._lock = threading.Lock()

    def __call__(self, body: Any):
        messages = body["messages"]
        if messages[0]["role"] == "system":
            system, first_user = messages[0]["content"], messages[1]["content"]
        else:  # the system prompt folded into the first user message (memory.llm.systemRole fold)
            system, _, first_user = messages[0]["content"].rpartition("\n\n")
        self.requests.append(body)
        user = user_document(first_user)
        if system == EXTRACTION_SYSTEM:
            kind, answer = "extraction", self.extract(user["turn"])
        elif system == RECONCILIATION_SYSTEM and self.reconcile is not None:
            kind, answer = "reconciliation", self.reconcile(user["memories"])
            with self._lock:
                self.offered.append(user["memories"])
        else:
            kind, answer = "other", (500, "unexpected prompt")
        with self._lock:
            self.calls[kind] += 1
        if isinstance(answer, tuple) or not isinstance(answer, str):
            return answer  # a raw (status, body) or Reply: outages, timeouts
        return ollama_reply(answer) if self.provider == "ollama" else openai_reply(answer)


def add_only(memories: list) -> str:
    return json.dumps({"decisions": [{"index": m["index"], "action": "ADD"} for m in memories]})


def daily_text(root: Path) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").glob("*.md"))) if (root / "daily").exists() else ""


#: a well-formed extraction of TURN: two memories, two entities, one relation
GOOD = extraction(
    memory("Morgan leads Project Atlas.", 0.7, ["e1", "e2"]),
    memory("The Atlas launch is on March 15.", 0.9, ["e2"]),
    entities=[entity("e1", "Morgan", "person"), entity("e2", "Project Atlas")],
    relations=[{"from": "e1", "relation": "leads", "to": "e2"}],
)

#: a substantive turn the capture tests hand to the model
TURN = "user: what did we settle?\nassistant: Morgan leads Project Atlas; the launch is on March 15."


def run_once(store, clock, run_id="run-1", text=TURN, answer="Morgan leads Project Atlas; the launch is on March 15."):
    """Admit one turn and let a worker (no thread) project it and attempt its capture."""
    store.persist_completed_turn(run_id, answer, capture_text=text)
    worker = IntakeWorker(store, clock=clock)
    worker.process_due()
    return worker


def entry(root, run_id="run-1"):
    """The intake's content-free view of one run."""
    [found] = inspect_run(IntakeDirs(root), intake_id_for(run_id), Clock()())["entries"]
    return found
