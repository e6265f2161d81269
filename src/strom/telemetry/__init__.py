"""Client telemetry (KIP-714), sans-I/O: client-metrics subscriptions, client instances, OTLP metrics."""
