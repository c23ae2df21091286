"""The runtime layer: hot memory (USER.md / MEMORY.md), documents and memory spaces, for hosts.

Owns `RuntimeService`, the Layered strategy's recall budgets for one agent turn, recall across
memory spaces (each a vault opened through `MemoryStore`), and capacity maintenance.
"""
