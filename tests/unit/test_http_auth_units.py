"""Pure parts of strom.web.auth: the Basic header, PLAIN and SCRAM password checks, the default method;
and of strom.web.forwarded: who may name the principal a forwarded request is for."""

from __future__ import annotations

import base64

import pytest

from strom._util.errors import ConfigError
from strom.broker.broker import listener_setup
from strom.broker.config import BrokerConfig
from strom.broker.security.scram import make_credential
from strom.web.auth import authentication_method, parse_basic, plain_matches, scram_matches
from strom.web.forwarded import broker_principals, decode_principal, encode_principal, speaks_for_others


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_parse_basic() -> None:
    assert parse_basic(_basic("alice:s3:cret")) == ("alice", "s3:cret")  # the password may hold ':'
    assert parse_basic("basic " + base64.b64encode(b"bob:").decode()) == ("bob", "")
    for bad in ("Bearer abc", "Basic", "Basic !!!", _basic("no-colon"), _basic(":pw")):
        assert parse_basic(bad) is None, bad


def test_plain_matches_any_listener_password() -> None:
    users = {"alice": frozenset({"one", "two"})}
    assert plain_matches(users, "alice", "one") and plain_matches(users, "alice", "two")
    assert not plain_matches(users, "alice", "three")
    assert not plain_matches(users, "bob", "one")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_matches_the_stored_credential(mechanism: str) -> None:
    credential = make_credential(mechanism, "carol-secret", 4096)
    assert scram_matches(mechanism, credential, "carol-secret")
    assert not scram_matches(mechanism, credential, "carol-secret ")


def _method(**props: str) -> str:
    config = BrokerConfig(props)
    return authentication_method(config, listener_setup(config))


def test_default_method_follows_the_kafka_listeners() -> None:
    assert _method() == "NONE"
    sasl = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "PLAINTEXT",
    }
    assert _method(**sasl) == "BASIC"
    assert _method(**sasl, **{"http.authentication.method": "none"}) == "NONE"
    assert _method(**{"http.authentication.method": "BASIC"}) == "BASIC"
    with pytest.raises(ConfigError, match=r"http\.authentication\.method"):
        _method(**{"http.authentication.method": "KERBEROS"})


def test_only_a_brokers_login_may_name_the_principal_it_forwards_for() -> None:
    brokers = broker_principals(frozenset({"User:admin"}), "broker")
    assert brokers == {"User:admin", "User:broker"}
    assert speaks_for_others("User:broker", brokers) and speaks_for_others("User:admin", brokers)
    assert not speaks_for_others("User:CN=carol,O=Acme", brokers)
    assert broker_principals(frozenset(), "") == frozenset()  # no SASL inter-broker login, no super users


def test_forwarded_principals_round_trip_as_latin1_header_values() -> None:
    for principal in ("User:CN=carol,O=Acme\\, Inc.,C=US", "User:CN=Zoë Ünal,O=Straße", "User:alice"):
        value = encode_principal(principal)
        value.encode("latin-1")  # a header value
        assert decode_principal(value) == principal
    for bad in ("", "alice", ":alice", "User:"):
        assert decode_principal(encode_principal(bad)) is None, bad
