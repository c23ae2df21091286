"""Services the engine runs: the intake worker, BuJo capture, and the chat models they call.

The intake worker projects admitted turns, indexes them and resolves or retries them; capture
turns a turn into curated facts and graph edges through a chat model over HTTP.
"""
