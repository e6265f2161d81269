"""Metrics: hot-path counters (`counters`), latency histograms (`histogram`) and Prometheus families
named as the JMX exporter names Kafka's MBeans (`families`). The broker's collector that reads its state
at scrape time is `strom.web.metrics_collector`."""
