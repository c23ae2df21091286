"""`memvault serve --face web`: the vault's owner serves the web pages itself, on loopback."""

import json
import re
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.web_helpers import REPO, poll


def get(url: str, token: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with opener.open(request, timeout=60) as answer:
        return answer.status, answer.read().decode()


# An unknown face is refused before any vault or index is opened: that test stays local.


@pytest.mark.both_backends
def test_the_owner_serves_the_pages_and_a_client_write_shows_on_them(fixture_vault, tmp_path):
    log = open(tmp_path / "serve.log", "w+")
    owner = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(fixture_vault), "serve", "--face", "web",
                              "--web-port", "0"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                             text=True)  # fmt: skip
    try:

        def url():
            found = re.search(
                r"web pages at (http://127\.0\.0\.1:\d+/\?token=\S+)", (tmp_path / "serve.log").read_text()
            )
            return found and found.group(1)

        address = poll(url, what="the web face's URL")
        base, _, token = address.partition("/?token=")
        status, body = get(f"{base}/status.json", token)
        page = json.loads(body)
        assert status == 200 and page["owner"]["pid"] == owner.pid and page["owner"]["thisProcess"]
        # a client remembers through the owner; the owner's pages find it at once
        done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(fixture_vault), "remember",
                               "The pelicans moved to the north pond."],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        status, body = get(f"{base}/recall.json?q=pelicans+north+pond", token)
        assert status == 200 and json.loads(body)["hits"][0]["text"] == "The pelicans moved to the north pond."
    finally:
        owner.send_signal(signal.SIGTERM)
        owner.wait(timeout=120)
        log.close()
    assert owner.returncode == 0, (tmp_path / "serve.log").read_text()
    assert "stopped; the index is consistent" in (tmp_path / "serve.log").read_text()


def test_an_unknown_face_is_a_usage_error(fixture_vault):
    done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(fixture_vault), "serve", "--face", "tv"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "no face named 'tv'; known: web" in done.stderr
