"""strom.broker.network: the Kafka protocol over TCP, both ways.

Inbound, the listener: `server.KafkaServer` accepts connections, reads frames, runs each connection's
life as states (`connection_state`), decodes and dispatches requests to the handlers
(`request_dispatch`) and writes responses in request order, stored batches with ``sendfile``
(`response_writer`). Outbound, `net_client.BrokerConnection`: one connection to another broker, with
this broker's own security, used by the replica fetchers, the controller channel, transaction markers
and the registry's follower.

The broker core (replication, coordinators, control) may use `net_client` but never the listener
(an import-linter contract in pyproject.toml).
"""
