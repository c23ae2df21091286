"""The web pages' guard: loopback Host names only, a per-start access token, strict headers.

A pure ASGI middleware (no per-request thread hop) in front of every route, static files
included:

* Host must be `127.0.0.1:<port>`, `localhost:<port>` or `[::1]:<port>`: a DNS-rebinding page
  that reaches the port under another name is refused (400).
* The token comes as `?token=` (the URL `memvault web` prints, as Jupyter does), as
  `Authorization: Bearer <token>` (scripts), or as the cookie the first visit sets. A GET with a
  good `?token=` is answered with the cookie and a redirect to the same URL without the token,
  so the token does not stay in the address bar, history or a Referer. Without it: 401.
  The cookie is named after the port: cookies ignore ports, and two servers must not clash.
* A POST must also come from one of those origins (Origin header; when a browser sends none or
  `null`, its Sec-Fetch-Site must say same-origin).
* Every answer carries a Content-Security-Policy that allows nothing but this server's own
  stylesheet and images (no script at all, no inline style, no frames, forms post only here),
  plus nosniff, a same-origin Referer only, DENY framing and no-store.
"""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from memvault.indexer.runtime.loopback import LOOPBACK_NAMES, LoopbackPolicy, new_token

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
__all__ = ["CSP", "LOOPBACK_NAMES", "SECURITY_HEADERS", "Guard", "cookie_name", "new_token"]


def cookie_name(port: int) -> str:
    return f"memvault-web-{port}"


class Guard:
    def __init__(self, app, *, token: str, port: int) -> None:
        if not token or len(token) < 16:
            raise ValueError("the web access token must be at least 16 characters")
        self.app = app
        self.policy = LoopbackPolicy(token=token, port=port)  # the Host names, Origins and token check
        self.token = token
        self.port = port
        self.cookie = cookie_name(port)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if not self.policy.host_ok(headers):
            await _plain(send, 400, "This server answers only on 127.0.0.1, localhost or [::1] with its own port.")
            return
        if scope["method"] not in ("GET", "HEAD") and not self._same_origin(headers):
            await _plain(send, 403, "Cross-origin request refused: post from this server's own pages.")
            return
        query = scope.get("query_string", b"").decode("latin-1")
        pairs = parse_qsl(query, keep_blank_values=True)
        offered = [value for key, value in pairs if key == "token"]
        if offered and self._good(offered[-1]) and scope["method"] == "GET":
            await self._adopt(scope, pairs, send)
            return
        if not self._authorised(headers, offered):
            await _plain(send, 401, "Open the URL that `memvault web` printed: it carries this server's access token.")
            return
        await self.app(scope, receive, _with_headers(send))

    def _same_origin(self, headers: dict) -> bool:
        origin = headers.get(b"origin", b"").lower()
        if origin in self.policy.origins:
            return True
        # browsers may send "Origin: null" for a form post; their Fetch metadata still says where from
        return origin in (b"", b"null") and headers.get(b"sec-fetch-site", b"same-origin") == b"same-origin"

    def _good(self, candidate: str) -> bool:
        return self.policy.token_ok(candidate)

    def _authorised(self, headers: dict, offered: list[str]) -> bool:
        if offered:
            return self._good(offered[-1])
        if headers.get(b"authorization", b"").startswith(b"Bearer "):
            return self.policy.bearer_ok(headers)
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed Cookie header is simply no cookie
            return False
        morsel = cookies.get(self.cookie)
        return morsel is not None and self._good(morsel.value)

    async def _adopt(self, scope, pairs, send) -> None:
        rest = urlencode([(k, v) for k, v in pairs if k != "token"])
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode()),
                                (b"content-length", b"0"), *SECURITY_HEADERS]})  # fmt: skip
        await send({"type": "http.response.body", "body": b""})


def _with_headers(send):
    async def sender(message) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers", [])}
            extra = [(k, v) for k, v in SECURITY_HEADERS if k not in names]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return sender


async def _plain(send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
