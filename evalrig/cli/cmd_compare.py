"""Commands (being written)."""
