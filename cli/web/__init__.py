"""The web pages: Recall, Entities, Content and Status over the engine the CLI uses.

    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.app import build_app
    app = build_app(VaultReader(store), token="...", port=8765)   # a Starlette app

Nothing is imported here, so `memvault --help` never loads Starlette or Jinja2.
"""
