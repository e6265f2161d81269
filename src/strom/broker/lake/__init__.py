"""Iceberg topics' broker side: each partition leader's translation task (docs/iceberg.md)."""
