"""strom._util."""
