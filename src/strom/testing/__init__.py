"""Test support for users of Strom: real brokers as pytest fixtures (see `strom.testing.plugin`)."""

from strom.testing.broker_process import BrokerProcess

__all__ = ["BrokerProcess"]
