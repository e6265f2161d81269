"""Request handler registry: one async function per API key, plain dicts in and out.

A handler receives the request context and the decoded request body (a dict, see docs/architecture.md)
and returns the response body, or None when Kafka sends no response (Produce with acks=0). Both bodies
are typed with the API's ``TypedDict``s of strom.protocol.messages (plain dicts at run time). It raises
nothing for client mistakes: those become Kafka error codes inside the response. An exception escaping
a handler is a broker bug; the connection layer logs it and closes that client's connection.

What a handler may reach is what its context's `HandlerPorts` hold, as Kafka's ``KafkaApis`` is given
its collaborators: the replica manager, the metadata cache, the control plane and topic admin, the
coordinators' hosts, the credential store, the authorizer, the purgatory, the configuration, the clock
and the request counters. The composition root (`strom.broker.broker.Broker`) builds one `HandlerPorts`
and hands it to each listener; no handler imports or receives the `Broker` itself (an import-linter
contract), so what a handler depends on is written here, and a test can build a context from the parts
it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strom._util.clock import Clock, sleep_ms
from strom.broker.authorization import Authorizer
from strom.broker.client_telemetry import ClientInformation, ClientTelemetry
from strom.broker.config import BrokerConfig
from strom.broker.config_entities import ConfigEntities
from strom.broker.control.topic_admin import TopicAdmin
from strom.broker.coordinators.group_service import GroupService
from strom.broker.coordinators.share_state_service import ShareStateService
from strom.broker.coordinators.transaction_service import TransactionService
from strom.broker.group_config_service import GroupConfigs
from strom.broker.metadata_cache import ClusterMetadataStore
from strom.broker.network.client_quotas import ClientQuotas
from strom.broker.ports import ControlPlane
from strom.broker.replication.purgatory import Purgatory
from strom.broker.replication.replica_manager import ReplicaManager
from strom.broker.replication.share_partitions import SharePartitionManager
from strom.broker.security.connection import ListenerSecurity
from strom.broker.security.credentials import CredentialStore
from strom.broker.tiered.remote_log_manager import RemoteLogManager
from strom.coordinator.share.state import SharePersister
from strom.metrics.counters import BrokerCounters
from strom.protocol.api import SUPPORTED, ApiKey
from strom.protocol.messages import ApiVersionsResponseApiVersion, HandlerRegistry
from strom.quota.mutation import MutationQuota

LISTED_POLL_MS = 50
LISTED_WAIT_MS = 60_000  # past any client's request timeout: a request never stays parked for ever


@dataclass(frozen=True, slots=True)
class HandlerPorts:
    """The broker's parts a request handler uses, built once per broker (`Broker.handler_ports`)."""

    node_id: int
    cluster_id: str
    config: BrokerConfig
    clock: Clock
    metadata: ClusterMetadataStore
    replica_manager: ReplicaManager
    purgatory: Purgatory  # consumers' and followers' parked fetches
    control: ControlPlane
    topics: TopicAdmin
    groups: GroupService
    transactions: TransactionService
    credentials: CredentialStore
    authorizer: Authorizer | None  # None without authorizer.class.name: no ACL checks at all
    metrics: BrokerCounters | None  # None with metrics.enabled=false
    quotas: ClientQuotas  # client quotas in force on this broker (the request path records on them)
    config_entities: ConfigEntities  # quotas and dynamic broker configs in the metadata store
    # None without remote.log.storage.system.enable: fetches and ListOffsets never look at it then.
    remote_log_manager: RemoteLogManager | None = None
    client_telemetry: ClientTelemetry | None = None  # KIP-714 subscriptions and pushed client metrics
    # An Iceberg topic's partition this broker translates: (the next offset its table records, the wall
    # time since which its oldest record not in the table has waited or -1); None for any other.
    iceberg_position: Callable[[str, int], tuple[int, int] | None] | None = None
    # Share groups' share-partitions and share sessions on the partitions this broker leads (KIP-932).
    shares: SharePartitionManager | None = None
    share_state: ShareStateService | None = None  # the share coordinator (__share_group_state)
    share_persister: SharePersister | None = None  # the way to any share coordinator
    group_configs: GroupConfigs | None = None  # groups' own configs (the GROUP config resource)
    # The TLS listeners' security by lower-case listener name, registered as they start (main.py): an
    # AlterConfigs of a key store is checked against the certificate the listener serves (KIP-226).
    tls_listeners: dict[str, ListenerSecurity] = field(default_factory=dict)


async def until_listed(ports: HandlerPorts) -> None:
    """Wait until this broker's metadata cache lists the broker itself as live: the controller has
    sent its view since this broker registered. A broker restarts with an empty cache and listens
    before it is registered, for example while ZooKeeper still holds its previous session's node.
    Before that, a Metadata answer would list no brokers, and librdkafka 2.x decommissions every
    broker that a Metadata response leaves out. A client left without brokers stays stuck until it
    re-bootstraps. Kafka does not answer early: a ZooKeeper-mode broker starts processing requests
    only after it has registered, and a KRaft broker only after it has caught up with the metadata
    log. So Metadata and FindCoordinator wait here, and the client's own request timeout bounds the wait."""
    clock = ports.clock  # the broker's time line, so the core also runs under a manual clock
    deadline = clock.monotonic_ms() + LISTED_WAIT_MS
    while ports.node_id not in ports.metadata.brokers and clock.monotonic_ms() < deadline:
        await sleep_ms(clock, LISTED_POLL_MS)


@dataclass(slots=True)
class RequestContext:
    ports: HandlerPorts
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    remote_ns: int = 0  # time parked in the purgatory (metrics: RemoteTimeMs)
    # Who sent it, in Kafka's form: "User:ANONYMOUS" (PLAINTEXT, or TLS without a client certificate),
    # "User:<name>" after SASL, "User:CN=...,O=..." from a client certificate (mutual TLS). Set per
    # connection by server.py once it is authenticated; ACLs are decided on it.
    principal: str = "User:ANONYMOUS"
    listener: str = "PLAINTEXT"  # the name of the listener the request arrived on
    throttle_ms: int = 0  # client quotas: how long the connection stops reading after the response
    # CreateTopics, CreatePartitions, DeleteTopics from a client with a controller_mutation_rate (KIP-599):
    # the handler admits each topic through it; None: no such quota, every topic is admitted.
    mutation_quota: MutationQuota | None = None
    # The connection's client software (ApiVersions v3) and source port (client telemetry's selectors):
    # one object per connection, set by the listener; None where a request has no client connection.
    client_info: ClientInformation | None = None


# An entry of the handler table, whatever its API: the table is one dict, so the bodies' types are
# erased there; `handles` checks each handler against its API's types when it registers it.
Handler = Callable[[RequestContext, Any], Awaitable[Mapping[str, Any] | None]]


class CloseConnection(Exception):
    """Raised by a handler where Kafka answers by closing the client's connection; the message is logged.

    Kafka does this for a Produce with acks=0 that failed: there is no response to carry the error, and
    the reconnect makes the producer refresh its metadata.
    """


HANDLERS: dict[int, Handler] = {}


_H = TypeVar("_H", bound=Handler)


def _handles(api_key: ApiKey) -> Callable[[_H], _H]:
    """Register `fn` as the handler for `api_key` (one per key; a second registration is a bug)."""

    def register(fn: _H) -> _H:
        if int(api_key) in HANDLERS:
            raise RuntimeError(f"two handlers for {api_key.name}")
        HANDLERS[int(api_key)] = fn
        return fn

    return register


# ``@handles(ApiKey.X)``: typed per API key (messages.py), so each handler is checked against its bodies.
handles: HandlerRegistry[RequestContext] = _handles


def advertised_api_keys() -> list[ApiVersionsResponseApiVersion]:
    """ApiVersions entries: only keys with a handler, at the versions the conformance tests cover."""
    return [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted(SUPPORTED.items())
        if int(key) in HANDLERS
    ]
