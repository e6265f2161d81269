"""strom.broker.handlers."""
