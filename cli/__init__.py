"""The memvault command line: thin click commands over the indexer's MemoryStore."""
