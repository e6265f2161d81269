"""strom.console."""
