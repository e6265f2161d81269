"""The ``strom`` entry point (layer 6): argument parsing and dispatch to the broker or console tools."""
