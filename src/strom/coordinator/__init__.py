"""strom.coordinator."""
