"""strom.metrics."""
