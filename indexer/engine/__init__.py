"""The engine: `MemoryStore`, the one object the CLI, the MCP server and Python callers share.

It opens a vault, syncs and serves its index, and wires intake → projection → index → capture.
"""
