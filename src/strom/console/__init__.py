"""Client-side console tools behind ``strom topics|produce|consume|groups`` (layer 5).

They reach brokers only through confluent-kafka (AdminClient, Producer, Consumer), never through
Strom's broker, storage or protocol packages, so they work against any Kafka-compatible broker and
exercise its Kafka APIs end to end. User-facing failures are raised as
:class:`strom.console.errors.ConsoleError` with a one-line message; see ``docs/cli.md``.
"""
