"""strom.storage."""
