"""Credentials inside option values (`schema-registry=http://user:pass@host`, a claim-check
storage URI with keys) are masked wherever a run describes itself (manifest, logs, summary,
monitoring page), as Airflow masks connection passwords, and travel to spark-submit in the
environment instead of its process arguments (where `ps` and the job's command log show them)."""

from __future__ import annotations

import os
import re

import orjson

MASK = "***"
# the environment variable carrying the sensitive --protocol-option / --target-option items
ENV = "CDC_REPLAY_SECRET_OPTIONS"
# option names whose whole value is a secret; URL passwords and key-like query parameters are
# masked in every value
_SECRET_NAMES = re.compile(r"(password|passwd|secret|token|credential|api[-_]?key|access[-_]?key)", re.I)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.\-]*://[^/\s:@]*):(?P<password>[^@/\s]*)@", re.I)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:[^=&\s]*(?:password|passwd|secret|token|signature|credential|access[-_]?key|api[-_]?key)"
    r"[^=&\s]*)=)(?P<value>[^&\s]*)", re.I)


def mask_text(text: str) -> str:
    """The text with URL passwords and key-like query parameter values replaced by ***."""
    if not isinstance(text, str) or not text:
        return text
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['head']}{MASK}", text)


def mask_option(name: str, value):
    if isinstance(value, str) and value and _SECRET_NAMES.search(name):
        return MASK
    return mask_text(value) if isinstance(value, str) else value


def mask_options(options: dict) -> dict:
    return {k: mask_option(k, v) for k, v in options.items()}


def is_sensitive(item: str) -> bool:
    """Whether a K=V option item carries a credential."""
    name, _, value = item.partition("=")
    return mask_option(name, value) != value


def split_argv(argv: list[str]) -> tuple[list[str], dict]:
    """argv without the sensitive --protocol-option/--target-option items, and those items
    ({"--protocol-option": [...], ...}) for the environment."""
    kept, secret = [], {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        option, eq, inline = arg.partition("=")
        if option in ("--protocol-option", "--target-option"):
            value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            if value is not None and any(is_sensitive(part) for part in value.split("&")):
                secret.setdefault(option, []).append(value)
                i += 1 if eq else 2
                continue
        kept.append(arg)
        i += 1
    return kept, secret


def environment(secret: dict) -> dict:
    return {ENV: orjson.dumps(secret).decode()} if secret else {}


def argv_from_environment(argv: list[str], environ=None) -> list[str]:
    """The app's side: argv with the items split_argv moved to the environment put back."""
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return argv
    extra = []
    for option, values in orjson.loads(raw).items():
        for value in values:
            extra += [option, value]
    return [*argv, *extra]
