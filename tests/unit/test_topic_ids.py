"""Topic ids (KIP-516) in text and on disk: Kafka's Uuid text form, the ``partition.metadata`` file, and
the topic znode's id (Kafka's form written, Strom's former hex form still read)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.cluster.zk_paths import TopicAssignment
from strom.protocol.uuid_text import ZERO_UUID, new_uuid, parse_uuid, uuid_text
from strom.storage.partition_metadata import PARTITION_METADATA, read_topic_id, write_topic_id


def test_uuid_text_is_kafkas_url_safe_base64_without_padding() -> None:
    # base64 "ASNFZ4mrze8BI0VniavN7w==" without its padding
    raw = bytes.fromhex("0123456789abcdef0123456789abcdef")
    assert uuid_text(raw) == "ASNFZ4mrze8BI0VniavN7w"
    assert parse_uuid("ASNFZ4mrze8BI0VniavN7w") == raw
    assert uuid_text(bytes([0xFB] * 16)) == "-_v7-_v7-_v7-_v7-_v7-w"  # URL-safe alphabet
    assert parse_uuid(raw.hex()) == raw  # the hex form Strom wrote before
    for bad in ("", "not-a-uuid", "!" * 22, "zz" * 16):
        with pytest.raises(ValueError, match="not a uuid"):
            parse_uuid(bad)
    with pytest.raises(ValueError, match="16 bytes"):
        uuid_text(b"short")


def test_new_ids_are_version_4_never_reserved_nor_dash_led() -> None:
    ids = {new_uuid() for _ in range(2000)}
    assert len(ids) == 2000
    for value in ids:
        assert uuid.UUID(bytes=value).version == 4
        assert value not in (ZERO_UUID, (1).to_bytes(16, "big"))
        assert not uuid_text(value).startswith("-")


def test_partition_metadata_file_in_kafkas_format(tmp_path: Path) -> None:
    topic_id = new_uuid()
    assert read_topic_id(str(tmp_path)) is None
    write_topic_id(str(tmp_path), topic_id)
    text = (tmp_path / PARTITION_METADATA).read_text()
    assert text == f"version: 0\ntopic_id: {uuid_text(topic_id)}\n"
    assert read_topic_id(str(tmp_path)) == topic_id
    (tmp_path / PARTITION_METADATA).write_text("version: 1\ntopic_id: ASNFZ4mrze8BI0VniavN7w\n")
    assert read_topic_id(str(tmp_path)) is None  # a format this broker does not know: written again
    (tmp_path / PARTITION_METADATA).write_text("garbage")
    assert read_topic_id(str(tmp_path)) is None


def test_topic_znode_ids_written_in_kafkas_form_and_read_in_both() -> None:
    topic_id = new_uuid()
    encoded = TopicAssignment(topic_id, {0: [1]}).encode()
    assert f'"topic_id":"{uuid_text(topic_id)}"'.encode() in encoded.replace(b" ", b"")
    assert TopicAssignment.decode(encoded).topic_id == topic_id
    old = b'{"version": 3, "topic_id": "%s", "partitions": {"0": [1]}}' % topic_id.hex().encode()
    assert TopicAssignment.decode(old).topic_id == topic_id
    assert TopicAssignment.decode(b'{"version": 2, "partitions": {"0": [1]}}').topic_id == ZERO_UUID
