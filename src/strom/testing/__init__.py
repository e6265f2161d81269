"""strom.testing."""
