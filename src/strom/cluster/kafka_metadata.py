"""Kafka's metadata operations (ZooKeeper mode's ``KafkaMetadataClient``) over the `MetadataStore` port.

`KafkaMetadataClient` speaks in brokers, topics, assignments, configs, controller election and producer
id blocks; `strom.cluster.zk_partitions` (mixed in) adds the partition-state nodes. Below it is any
`MetadataStore`: a ZooKeeper ensemble (`strom.cluster.zookeeper_store`) or the in-process tree
(`strom.cluster.local_store`); the znodes and their JSON are the same on both (`strom.cluster.zk_paths`).

Fencing: partition-state writes take the version the writer read (conditional set); the controller's
writes additionally check, in the same multi, that ``/controller_epoch`` still has the version this
controller wrote when it was elected, so a deposed controller can change nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import urllib.parse
from collections.abc import Callable

from strom.cluster import zk_paths as paths
from strom.cluster.metadata_store import (
    BadVersionError,
    Check,
    ControllerMovedError,
    Create,
    MetadataStore,
    MetadataStoreError,
    MultiFailed,
    NodeExistsError,
    NoNodeError,
    SetData,
    Watch,
)
from strom.cluster.zk_batching import ZkStats
from strom.cluster.zk_partitions import PartitionStateOps
from strom.cluster.zk_paths import BrokerRegistration, TopicAssignment
from strom.protocol.errors import ErrorCode, KafkaError

__all__ = ["ControllerMovedError", "KafkaMetadataClient", "MetadataStoreError"]


class KafkaMetadataClient(PartitionStateOps):
    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @property
    def stats(self) -> ZkStats:
        return self.store.stats

    # life cycle ------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 15.0) -> None:
        self.store.start(timeout_s)
        for path in paths.PERSISTENT_PATHS:
            self.store.ensure_path(path)

    def close(self) -> None:
        self.store.close()

    @property
    def session_state(self) -> str:
        """``CONNECTED``, ``SUSPENDED`` (reconnecting) or ``LOST``."""
        return self.store.session_state

    def on_state_change(self, callback: Callable[[str], None]) -> None:
        """``callback("LOST" | "RECONNECTED_NEW_SESSION" | "SUSPENDED" | "CONNECTED")`` on the loop."""
        self.store.on_state_change(callback)

    # watches ---------------------------------------------------------------------------------------
    def watch_children(self, path: str, callback: Watch) -> list[str]:
        return self.store.watch_children(path, callback)

    def watch_data(self, path: str, callback: Watch) -> bytes | None:
        """The node's data (None if absent), leaving a watch for its creation, change or deletion."""
        return self.store.watch_data(path, callback)

    # cluster id ------------------------------------------------------------------------------------
    def get_or_create_cluster_id(self, candidate: str) -> str:
        try:
            self.store.create(paths.CLUSTER_ID, paths.encode_cluster_id(candidate))
            return candidate
        except NodeExistsError:
            data, _ = self.store.get(paths.CLUSTER_ID)
            return paths.decode_cluster_id(data)

    # brokers ---------------------------------------------------------------------------------------
    def register_broker(self, registration: BrokerRegistration) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; a live broker with the same id is an error.

        Returns the registration's broker epoch (the znode's czxid, what the controller reads as
        `BrokerRegistration.epoch` and puts in its requests to this broker)."""
        path = paths.broker_path(registration.broker_id)
        for _attempt in range(3):
            try:
                self.store.create(path, registration.encode(), ephemeral=True)
                _, stat = self.store.get(path)
            except NodeExistsError:
                try:
                    _, stat = self.store.get(path)
                except NoNodeError:
                    # The previous owner's session expired between our create and get: create again.
                    continue
                if stat.ephemeral_owner != self.store.session_id:
                    raise MetadataStoreError(
                        f"broker id {registration.broker_id} is already registered"
                    ) from None
                return stat.czxid
            except NoNodeError:
                continue  # our session expired right after the create: create again
            if stat.ephemeral_owner == self.store.session_id:
                return stat.czxid
        raise MetadataStoreError(
            f"registering broker {registration.broker_id} kept racing with another owner"
        )

    def get_broker_epochs(self) -> dict[int, int] | None:
        """The registrations the last active controller took in (None: no controller recorded any)."""
        try:
            data, _ = self.store.get(paths.BROKER_EPOCHS)
        except NoNodeError:
            return None
        return paths.decode_broker_epochs(data)

    def set_broker_epochs(self, epochs: dict[int, int], epoch_zk_version: int) -> None:
        """Record the registrations this controller has taken in (fenced by the controller epoch)."""
        data = paths.encode_broker_epochs(epochs)
        self.store.ensure_path(paths.BROKER_EPOCHS.rsplit("/", 1)[0])
        write = SetData(paths.BROKER_EPOCHS, data) if self.store.exists(paths.BROKER_EPOCHS) else None
        try:
            self.store.multi(
                [Check(paths.CONTROLLER_EPOCH, epoch_zk_version), write or Create(paths.BROKER_EPOCHS, data)]
            )
        except MultiFailed as failed:
            if failed.index == 0:
                raise ControllerMovedError("controller epoch changed") from None
            raise MetadataStoreError(f"recording broker epochs: {failed.cause}") from None

    def get_brokers(self) -> dict[int, BrokerRegistration]:
        found: dict[int, BrokerRegistration] = {}
        for child in self.store.children(paths.BROKER_IDS):
            with contextlib.suppress(NoNodeError, ValueError, KeyError):
                data, stat = self.store.get(f"{paths.BROKER_IDS}/{child}")
                reg = BrokerRegistration.decode(int(child), data)
                found[int(child)] = dataclasses.replace(reg, epoch=stat.czxid)
        return found

    # controller ------------------------------------------------------------------------------------
    def get_controller_id(self) -> int:
        try:
            data, _ = self.store.get(paths.CONTROLLER)
            return paths.decode_controller(data)
        except (NoNodeError, ValueError, KeyError):
            return -1

    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Create ephemeral ``/controller``; on success bump ``/controller_epoch``.

        Returns (controller epoch, znode version of /controller_epoch) or None if another broker won.
        """
        try:
            self.store.create(paths.CONTROLLER, paths.encode_controller(broker_id), ephemeral=True)
        except NodeExistsError:
            return None
        while True:
            try:
                data, stat = self.store.get(paths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.store.create(paths.CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(data.decode() or "0") + 1
            try:
                new = self.store.set(paths.CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
                return epoch, int(new.version)
            except BadVersionError:
                continue

    def resign_controller(self, broker_id: int) -> None:
        with contextlib.suppress(Exception):
            if self.get_controller_id() == broker_id:
                self.store.delete(paths.CONTROLLER)

    # topics ----------------------------------------------------------------------------------------
    def get_topics(self) -> list[str]:
        return sorted(self.store.children(paths.BROKER_TOPICS))

    def create_topic(self, name: str, assignment: TopicAssignment, configs: dict[str, str]) -> None:
        """Write the configs, then the assignment (which the controller watches), atomically."""
        config_path = paths.topic_config_path(name)
        config = paths.encode_topic_config(configs)
        exists = self.store.exists(config_path) is not None
        try:
            self.store.multi(
                [
                    SetData(config_path, config) if exists else Create(config_path, config),
                    Create(paths.topic_path(name), assignment.encode()),
                ]
            )
        except MultiFailed as failed:
            if isinstance(failed.cause, NodeExistsError):
                raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists") from None
            raise MetadataStoreError(f"creating topic {name}: {failed.cause!r}") from None

    def get_topic_assignment(self, name: str) -> tuple[TopicAssignment, int] | None:
        try:
            data, stat = self.store.get(paths.topic_path(name))
        except NoNodeError:
            return None
        return TopicAssignment.decode(data), int(stat.version)

    def get_topic_assignments(
        self, topics: list[str], on_change: Callable[[str], Watch]
    ) -> dict[str, tuple[TopicAssignment, int] | None]:
        """Every topic's assignment and znode version (None if gone), read with pipelined requests,
        each leaving a data watch that runs ``on_change(topic)`` on the loop."""
        watches = [on_change(topic) for topic in topics]
        found = self.get_many([paths.topic_path(topic) for topic in topics], watches)
        return {
            topic: None if got is None else (TopicAssignment.decode(got[0]), int(got[1].version))
            for topic, got in zip(topics, found, strict=True)
        }

    def set_topic_assignment(self, name: str, assignment: TopicAssignment, version: int) -> int | None:
        """Conditional write; the new version, or None if someone wrote in between."""
        try:
            stat = self.store.set(paths.topic_path(name), assignment.encode(), version)
        except (BadVersionError, NoNodeError):
            return None
        return int(stat.version)

    def get_topic_config(self, name: str) -> dict[str, str]:
        try:
            data, _ = self.store.get(paths.topic_config_path(name))
        except NoNodeError:
            return {}
        return paths.decode_topic_config(data)

    def set_topic_config(self, name: str, configs: dict[str, str]) -> None:
        path = paths.topic_config_path(name)
        try:
            self.store.set(path, paths.encode_topic_config(configs))
        except NoNodeError:
            self.store.create(path, paths.encode_topic_config(configs), make_parents=True)
        self.store.create(
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_config_change(name),
            sequential=True,
        )

    # SCRAM credentials (Kafka's /config/users/<user>; quotas share the map, so read-modify-write) --
    def get_user_config(self, user: str) -> dict[str, str]:
        try:
            data, _ = self.store.get(paths.user_config_path(user))
        except NoNodeError:
            return {}
        return paths.decode_topic_config(data)

    def list_config_users(self) -> list[str]:
        try:
            children = self.store.children(paths.CONFIG_USERS)
        except NoNodeError:
            return []
        return [urllib.parse.unquote(child) for child in children]

    def update_user_config(self, user: str, changes: dict[str, str | None]) -> None:
        """Set (or, with None, remove) keys of the user's config map, conditionally on its version,
        then post a change notification so every broker reloads it."""
        path = paths.user_config_path(user)
        for _attempt in range(10):
            try:
                data, stat = self.store.get(path)
                config, version = paths.decode_topic_config(data), stat.version
            except NoNodeError:
                config, version = {}, -1
            for key, value in changes.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            try:
                if version < 0:
                    self.store.create(path, paths.encode_topic_config(config), make_parents=True)
                else:
                    self.store.set(path, paths.encode_topic_config(config), version=version)
                break
            except (BadVersionError, NodeExistsError):
                continue
        else:
            raise MetadataStoreError(f"updating {path} kept racing with other writers")
        self.store.create(
            f"{paths.CONFIG_CHANGES}/config_change_",
            paths.encode_user_change(user),
            sequential=True,
            make_parents=True,
        )

    def read_user_change(self, child: str) -> str | None:
        try:
            data, _ = self.store.get(f"{paths.CONFIG_CHANGES}/{child}")
        except NoNodeError:
            return None
        return paths.decode_user_change(data)

    def read_config_change(self, child: str) -> str | None:
        try:
            data, _ = self.store.get(f"{paths.CONFIG_CHANGES}/{child}")
        except NoNodeError:
            return None
        return paths.decode_config_change(data)

    def mark_topic_for_deletion(self, name: str) -> None:
        with contextlib.suppress(NodeExistsError):
            self.store.create(f"{paths.DELETE_TOPICS}/{name}")

    def delete_topic_znodes(self, name: str) -> None:
        for path in (paths.topic_path(name), paths.topic_config_path(name), f"{paths.DELETE_TOPICS}/{name}"):
            with contextlib.suppress(NoNodeError):
                self.store.delete(path, recursive=True)

    # producer ids ----------------------------------------------------------------------------------
    def allocate_producer_id_block(self, broker_id: int, size: int) -> int:
        """Claim the next block of producer ids (conditional write, retried); returns its first id."""
        while True:
            try:
                data, stat = self.store.get(paths.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.store.create(
                        paths.PRODUCER_ID_BLOCK,
                        paths.encode_producer_id_block(broker_id, 0, size - 1),
                    )
                    return 0
                except NodeExistsError:
                    continue
            start = paths.decode_producer_id_block_end(data) + 1
            try:
                self.store.set(
                    paths.PRODUCER_ID_BLOCK,
                    paths.encode_producer_id_block(broker_id, start, start + size - 1),
                    stat.version,
                )
                return start
            except BadVersionError:
                continue
