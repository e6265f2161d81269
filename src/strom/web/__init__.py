"""The broker's HTTP side (layer 4½, just above `strom.broker`): everything served on ``http.listeners``.

`server` is the listener itself (aiohttp on the broker's event loop; features mount their routes on it),
`registry_api` Confluent Schema Registry's REST API over the broker's `RegistryService`, `metrics`
``/metrics`` (with `metrics_collector` reading the broker's state at scrape time), `console` the web
console at ``/ui/``, and `side` composes them for one broker. This is the only package that imports
aiohttp; the broker core knows the HTTP side only through the small port of `strom.broker.main`
(`HttpSide`), and `strom.node` puts the two together in one process.
"""
