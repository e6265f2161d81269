"""``strom groups describe`` of an id that became a share group while it was being described: the
command looks the id up as a share group first and, finding none, as a consumer group; if a share
group's first member joins in between, the consumer-group side's offset fetch is answered
GROUP_ID_NOT_FOUND (one group id, one group type) and the command describes the share group instead of
failing. The interleaving's second half is asked of a real broker directly: the share group exists,
and the consumer-group side's offset fetch of its id says so."""

from __future__ import annotations

import io
from pathlib import Path

from strom.console import groups
from strom.console.clients import ClientOptions
from strom.console.topics import admin_client
from strom.protocol.api import ApiKey
from strom.testing import BrokerProcess
from tests.integration.rawclient import RawClient
from tests.integration.test_share_groups import CONFIGS, make_topic


def test_offsets_of_a_share_groups_id_read_as_a_consumer_group_say_so(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", CONFIGS)
    broker.start()
    try:
        make_topic(broker.bootstrap, "jobs")
        with RawClient(broker.bootstrap) as raw:
            joined = raw.call(
                ApiKey.SHARE_GROUP_HEARTBEAT,
                1,
                {
                    "group_id": "workers",
                    "member_id": "",
                    "member_epoch": 0,
                    "rack_id": None,
                    "subscribed_topic_names": ["jobs"],
                },
            )
            assert joined["error_code"] == 0, joined
            options = ClientOptions(broker.bootstrap)
            # None, not an error: describe_group then looks the id up as a share group again.
            assert groups._committed_offsets(admin_client(options), options, "workers") is None
            # A consumer group's id is still read as one (no committed offsets: empty, not None).
            assert groups._committed_offsets(admin_client(options), options, "nobody") == {}
            # On this fresh broker the share coordinator is still loading `__share_group_state` when
            # the command asks for the offsets (COORDINATOR_NOT_AVAILABLE): it asks again.
            out = io.StringIO()
            groups.describe_group(options, "workers", out)
            assert out.getvalue().startswith("Group workers: type share"), out.getvalue()
    finally:
        broker.stop()
