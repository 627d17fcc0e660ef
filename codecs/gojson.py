"""JSON strings escaped exactly as TiCDC's Go encoders write them.

TiCDC builds its JSON with easyjson's jwriter (and Go's encoding/json for DDL and watermark
messages): `<`, `>`, `&` become \\u003c \\u003e \\u0026, control characters \\u00xx with
lower-case hex except \\n \\r \\t, and U+2028/U+2029 are escaped. No kept JSON library offers
this escaping (orjson writes `<` as is), so the table below is written by hand; decoding uses
orjson, which reads any valid JSON.
"""

from __future__ import annotations

import re

_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in range(0x20)}
_ESCAPES.update(
    {
        ord("\n"): "\\n",
        ord("\r"): "\\r",
        ord("\t"): "\\t",
        ord('"'): '\\"',
        ord("\\"): "\\\\",
        ord("<"): "\\u003c",
        ord(">"): "\\u003e",
        ord("&"): "\\u0026",
        0x2028: "\\u2028",
        0x2029: "\\u2029",
    }
)


# the characters `_ESCAPES` rewrites: most values hold none, and a search is cheaper than a translate
_NEEDS_ESCAPE = re.compile("[" + re.escape("".join(chr(c) for c in sorted(_ESCAPES))) + "]")


def quote(text: str) -> str:
    """`text` as a JSON string literal, escaped as TiCDC escapes it."""
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + text.translate(_ESCAPES) + '"'
