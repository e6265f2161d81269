"""The share-session cache of a partition leader (KIP-932's ShareSessionCache): pure bookkeeping.

Theory of operation. A share consumer opens one share session per leader (ShareFetch at epoch 0)
keyed by its group id and member id, which the client chooses; nothing else bounds them. So the cache
holds at most ``max_sessions`` sessions (`group.share.max.share.sessions`, Kafka's default 2000), and
a session not used for ``eviction_ms`` (the share group's session timeout, after which the member is
out of the group anyway) is stale: `expire` takes the stale ones out, and `open` refuses a new session
while the cache is full of live ones (the caller answers SHARE_SESSION_LIMIT_REACHED). Re-opening an
existing key replaces that session and needs no room.

The cache keeps sessions in least-recently-used order, so `expire` looks only at the stale head.
Time is the caller's monotonic milliseconds. The caller releases what an evicted session's member
holds; the cache does no I/O and knows nothing of records.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

__all__ = ["DEFAULT_MAX_SESSIONS", "ShareSession", "ShareSessionCache", "TopicPartition"]

DEFAULT_MAX_SESSIONS = 2000

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: set[TopicPartition] = field(default_factory=set)
    last_used_ms: int = 0


class ShareSessionCache:
    def __init__(self, max_sessions: int, eviction_ms: int) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._sessions: OrderedDict[tuple[str, str], ShareSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def open(self, group_id: str, member_id: str, now_ms: int) -> ShareSession | None:
        """A new session for the member (replacing its previous one), or None when the cache is full."""
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= self.max_sessions:
            return None
        self._sessions.pop(key, None)
        session = self._sessions[key] = ShareSession(group_id, member_id, last_used_ms=now_ms)
        return session

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def has_group(self, group_id: str) -> bool:
        """Whether any session of the group is open."""
        return any(g == group_id for g, _ in self._sessions)

    def touch(self, session: ShareSession, now_ms: int) -> None:
        """Mark the session used now (a request at its right epoch: a wrong one keeps nothing alive)."""
        session.last_used_ms = now_ms
        self._sessions.move_to_end((session.group_id, session.member_id))

    def remove(self, session: ShareSession) -> None:
        key = (session.group_id, session.member_id)
        if self._sessions.get(key) is session:
            del self._sessions[key]

    def expire(self, now_ms: int) -> list[ShareSession]:
        """Take out and return the sessions unused for longer than ``eviction_ms``."""
        evicted: list[ShareSession] = []
        while self._sessions:
            key, oldest = next(iter(self._sessions.items()))
            if now_ms - oldest.last_used_ms <= self.eviction_ms:
                break
            del self._sessions[key]
            evicted.append(oldest)
        return evicted
