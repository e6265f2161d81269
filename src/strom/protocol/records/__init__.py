"""strom.protocol.records."""
