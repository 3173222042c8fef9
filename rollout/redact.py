"""Keeping secrets out of what the tool prints and records.

Two layers. Command lines are redacted by shape: the value after a flag whose name says it is
secret (`--api-key X`, `--admin-api-key=X`, `--ssl-keyfile-password X`, any `*token*`,
`*secret*`, `*password*`) becomes `<redacted>`. And every secret value the tool itself loaded
(the API key from the environment or a file) is registered here, so any text that reaches the
audit log, a pid file, a result file or the terminal can be scrubbed of it by value.
"""
from __future__ import annotations

import re

REDACTED = "REDACTED"
_SECRET_WORDS = {"token", "secret", "password", "passwd", "apikey", "credential", "credentials"}
_known: set[str] = set()


def secret_name(name: str) -> bool:
    """Whether a flag or variable name names a secret: one of its words is token, secret,
    password..., or it holds "api key" (`--tokenizer-path` is not one, `--hf-token` is)."""
    words = [w for w in re.split(r"[-_]+", name.lower().lstrip("-")) if w]
    return bool(set(words) & _SECRET_WORDS) or any(a == "api" and b == "key" for a, b in zip(words, words[1:]))


def register(value: str) -> None:
    """Remember a secret value so scrub() removes it wherever it appears."""
    if value and len(value) >= 4:  # shorter values would erase ordinary text
        _known.add(value)


def scrub(text: str) -> str:
    for value in sorted(_known, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of every secret-looking flag replaced (both `--f v` and `--f=v`)."""
    out, hide_next = [], False
    for item in argv:
        item = str(item)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, _ = item.partition("=")
        if flag.startswith("-") and secret_name(flag):
            if eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(item)
                hide_next = True
            continue
        out.append(scrub(item))
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if secret_name(k) else scrub(v)) for k, v in env.items()}


def scrub_obj(obj):
    """A JSON-like object with every registered secret scrubbed from its strings."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v) for v in obj]
    return obj
