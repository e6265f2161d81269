"""One broker's HTTP side: the listener with the registry, the console and ``/metrics`` mounted on it.

`start_http_side` is what `strom.node` hands to `strom.broker.main.run_broker` (the broker's `HttpSide`
port): it runs once the Kafka listeners are bound, so the advertised host is known. The registry's URL
(where other brokers forward writes) is the first bound HTTP listener's, with the advertised host in
place of a wildcard address; the line ``Strom broker <id> HTTP on <url>`` announces it.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.broker import Broker
from strom.broker.config import BrokerConfig
from strom.broker.security.tls import client_context, server_context
from strom.metrics.history import MetricHistory
from strom.web.auth import HttpAuthenticator, authentication_middleware
from strom.web.authz import HttpAuthorizer, metrics_middleware
from strom.web.console.routes import ConsoleApi
from strom.web.console.sampler import HistorySampler
from strom.web.metrics import MetricsApi
from strom.web.registry_api import RegistryApi
from strom.web.server import HttpServer


class WebSide:
    """The running HTTP side; `stop` closes the listener, then what its features hold open."""

    def __init__(
        self,
        http: HttpServer,
        registry_api: RegistryApi,
        metrics_api: MetricsApi | None,
        console: ConsoleApi,
        sampler: HistorySampler | None = None,
    ) -> None:
        self.http = http
        self._console = console
        self._registry_api = registry_api
        self._metrics_api = metrics_api
        self._sampler = sampler

    async def stop(self) -> None:
        await self.http.stop()
        self._console.close()
        if self._sampler is not None:
            await self._sampler.stop()
        await self._registry_api.close()
        if self._metrics_api is not None:
            await self._metrics_api.close()


async def start_http_side(
    config: BrokerConfig, broker: Broker, connection_count: Callable[[], int]
) -> WebSide:
    """The HTTP listener with the registry's routes, the console and, unless ``metrics.enabled=false``,
    ``/metrics``."""
    authz = HttpAuthorizer(lambda: broker.authorizer)
    login = broker.inter_broker_security
    auth = HttpAuthenticator.from_config(
        config, broker.listener_setup, lambda: broker.credentials, login.username
    )
    public = frozenset({"/metrics"}) if config.get("http.metrics.public") else frozenset()
    http = HttpServer(
        config.get("http.listeners"),
        default_listener="http.listeners" not in config.raw,
        tls=lambda: server_context(config, "HTTP"),
        middlewares=[authentication_middleware(auth, public), metrics_middleware(authz, bool(public))],
    )
    # Forwarded writes reach the writer's https:// listener with the HTTP listener's trust store (and
    # key store, should the writer ask for a client certificate).
    # A user with a certificate but no password is forwarded under the broker's inter-broker login.
    forward_login = (login.username, login.password) if login.mechanism is not None else None
    registry_api = RegistryApi(broker.registry, client_context(config, "HTTP"), authz, forward_login)
    http.mount(registry_api.routes())
    sampler = None
    if broker.metrics is not None:  # the charts draw the counters metrics.enabled keeps
        history = MetricHistory(bucket_ms=config.get("http.console.history.interval.ms"))
        sampler = HistorySampler(broker, history)
    console = ConsoleApi(broker, authz, sampler)
    http.mount(console.routes())
    metrics_api = None
    if broker.metrics is not None:
        metrics_api = MetricsApi(broker, broker.metrics, connection_count)
        http.mount(metrics_api.routes())
    bound = await http.start()
    if bound and sampler is not None:
        sampler.start()
    else:
        sampler = None
    if bound:
        host, port = bound[0]
        shown = host if host not in ("0.0.0.0", "::") else broker.advertised.host
        scheme = "https" if http.secure[0] else "http"
        broker.registry.url = f"{scheme}://{shown}:{port}"
        print(f"Strom broker {broker.node_id} HTTP on {broker.registry.url}", flush=True)
    return WebSide(http, registry_api, metrics_api, console, sampler)
