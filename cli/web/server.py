"""Serving the app with uvicorn on loopback only: 127.0.0.1 and, where the host has it, ::1.

The binding and the uvicorn runner are shared with every other loopback face (`memvault mcp
--http`, a host's per-turn endpoint): they live in `memvault.indexer.runtime.loopback`, and this
module names them for the web pages. The sockets are bound there, never from a host name, so no
option or environment variable can put the pages on another interface.
"""

from __future__ import annotations

from memvault.indexer.runtime.loopback import Bound, PortUnavailable, bind_loopback, serve

__all__ = ["Bound", "PortUnavailable", "bind_loopback", "serve"]
