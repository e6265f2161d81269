"""One Strom node: the Kafka broker (`strom.broker`) and its HTTP side (`strom.web`) in one process.

This is the process's composition root: `serve` hands `strom.web.side.start_http_side` to the broker's
entry point, so the broker core never imports the HTTP layer above it. ``python -m strom.node`` and
``strom serve`` both run it.
"""
