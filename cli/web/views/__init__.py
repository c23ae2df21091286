"""One module per page kind: recall, entities, content, status (and the base view they share)."""
