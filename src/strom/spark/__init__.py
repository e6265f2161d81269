"""strom.spark."""
