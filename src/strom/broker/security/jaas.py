"""Kafka's ``sasl.jaas.config`` syntax (its JaasConfig), parsed as Kafka parses it:

    <login module class> <flag> [<key>=<value> ...];

exactly one module entry; the flag is required, requisite, sufficient or optional; keys are words
(letters, digits, ``_ - $ .``); values are words or strings quoted with ``"`` or ``'`` in which a
backslash escapes the next character; ``//`` and ``/* */`` comments may appear between tokens; the
closing ``;`` is mandatory. For PLAIN (``PlainLoginModule``) the broker's logins are the
``user_<name>="<password>"`` options, and ``username``/``password`` are its own for inter-broker
connections. Errors never quote values (they are passwords).
"""

from __future__ import annotations

from dataclasses import dataclass

from strom._util.errors import ConfigError

FLAGS = ("required", "requisite", "sufficient", "optional")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True, slots=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str]

    def plain_users(self) -> dict[str, str]:
        """PLAIN's ``user_<name>`` logins: name -> password."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_-$."


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: word, string, or a single symbol (``=`` ``;``)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ConfigError("sasl.jaas.config: unterminated comment")
            i = end + 2
        elif ch in "\"'":
            value, i = [], i + 1
            while i < n and text[i] != ch:
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            if i >= n:
                raise ConfigError("sasl.jaas.config: unterminated quoted value")
            out.append(("string", "".join(value)))
            i += 1
        elif _is_word_char(ch):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            out.append(("word", text[start:i]))
        else:
            out.append(("symbol", ch))
            i += 1
    return out


def parse_jaas(text: str) -> JaasEntry:
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise ConfigError("sasl.jaas.config: expected '<LoginModule> <flag> [key=value ...];'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in FLAGS:
        raise ConfigError(
            f"sasl.jaas.config: invalid control flag {tokens[1][1]!r} (one of {', '.join(FLAGS)})"
        )
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i] != ("symbol", ";"):
        if (
            i + 2 >= len(tokens)
            or tokens[i][0] != "word"
            or tokens[i + 1] != ("symbol", "=")
            or tokens[i + 2][0] not in ("word", "string")
        ):
            raise ConfigError(
                f"sasl.jaas.config: expected key=value after {module} at option {len(options) + 1}"
            )
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
    if i >= len(tokens):
        raise ConfigError("sasl.jaas.config: the entry must end with ';'")
    if i + 1 != len(tokens):
        raise ConfigError("sasl.jaas.config: exactly one login module entry is allowed")
    return JaasEntry(module, flag, options)
