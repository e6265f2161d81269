"""Deterministic simulation: Strom brokers, their controller and clients in one thread on simulated time."""
