"""DDL kinds: TiDB's action names and codes, and classifying a DDL query into one.

The canonical `ddl_type` is TiDB's action name ("create table", "add column", ...): TiDB has the
richest set and TiCDC's open protocol and craft carry its numeric code. Protocols that carry a
coarser type (Canal's CREATE/ALTER/QUERY) map to and from it. `classify` reads the query with
sqlglot's MySQL tokenizer (comments, quoting and backticks handled by a real lexer); applying
DDL to schemas is a different job, done with sqlglot's parser in spark_apps/ddl.py.
"""

from __future__ import annotations

import functools

# TiDB's ActionType codes (pkg/meta/model) and names (ActionMap), used by open protocol and craft.
ACTION_CODES: dict[str, int] = {
    "none": 0,
    "create schema": 1,
    "drop schema": 2,
    "create table": 3,
    "drop table": 4,
    "add column": 5,
    "drop column": 6,
    "add index": 7,
    "drop index": 8,
    "add foreign key": 9,
    "drop foreign key": 10,
    "truncate table": 11,
    "modify column": 12,
    "rebase auto_increment ID": 13,
    "rename table": 14,
    "set default value": 15,
    "shard row ID": 16,
    "modify table comment": 17,
    "rename index": 18,
    "add partition": 19,
    "drop partition": 20,
    "create view": 21,
    "modify table charset and collate": 22,
    "truncate partition": 23,
    "drop view": 24,
    "recover table": 25,
    "modify schema charset and collate": 26,
    "lock table": 27,
    "unlock table": 28,
    "repair table": 29,
    "set tiflash replica": 30,
    "update tiflash replica status": 31,
    "add primary key": 32,
    "drop primary key": 33,
    "create sequence": 34,
    "alter sequence": 35,
    "drop sequence": 36,
    "add multi-columns": 37,
    "drop multi-columns": 38,
    "modify auto id cache": 39,
    "rebase auto_random ID": 40,
    "alter index visibility": 41,
    "exchange partition": 42,
    "add check constraint": 43,
    "drop check constraint": 44,
    "alter check constraint": 45,
    "rename tables": 47,
    "drop indexes": 48,
    "alter table attributes": 49,
    "alter table partition attributes": 50,
    "create placement policy": 51,
    "alter placement policy": 52,
    "drop placement policy": 53,
    "alter table partition placement": 54,
    "modify schema default placement": 55,
    "alter table placement": 56,
    "alter table cache": 57,
    "alter table statistics options": 58,
    "alter table nocache": 59,
    "create tables": 60,
    "alter table multi-schema change": 61,
    "flashback cluster": 62,
    "flashback schema": 63,
    "alter table reorganize partition": 64,
    "alter table ttl": 65,
    "alter table no_ttl": 67,
    "create resource group": 68,
    "alter resource group": 69,
    "drop resource group": 70,
    "alter table partition by": 71,
    "alter table remove partitioning": 72,
}
ACTION_NAMES: dict[int, str] = {code: name for name, code in ACTION_CODES.items()}

@functools.cache
def _dialect():
    """sqlglot's MySQL dialect, imported on the first DDL query: importing sqlglot costs about
    0.3 CPU s, paid by every process that imports the codecs (the CLI, the driver, workers)."""
    from sqlglot.dialects.mysql import MySQL

    return MySQL()


def _words(query: str) -> tuple[list[str], list[bool]]:
    """Upper-case token texts and, per token, whether it sits at parenthesis depth 0."""
    try:
        tokens = _dialect().tokenize(query)
    except Exception:  # the tokenizer rejects unbalanced quotes: fall back to plain words
        words = query.upper().split()
        return words, [True] * len(words)
    from sqlglot.tokens import TokenType

    words, top = [], []
    depth = 0
    for t in tokens:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        quoted = t.token_type in (TokenType.IDENTIFIER, TokenType.STRING)
        # multi-word keywords ("PRIMARY KEY", "CHARACTER SET") become one word each
        for word in ["`"] if quoted else t.text.upper().split():
            words.append(word)
            top.append(depth == 0)
    return words, top


@functools.lru_cache(maxsize=1024)
def classify(query: str | None) -> str:
    """TiDB's action name for a DDL query, "none" when it is not recognised."""
    if not query:
        return "none"
    w, top = _words(query)
    if not w:
        return "none"
    first = w[0]
    rest = w[1:]
    if first == "CREATE":
        for word in rest:
            if word in ("DATABASE", "SCHEMA"):
                return "create schema"
            if word == "TABLE":
                return "create table"
            if word == "VIEW":
                return "create view"
            if word == "INDEX":
                return "add index"
            if word == "SEQUENCE":
                return "create sequence"
            if word in ("PLACEMENT", "RESOURCE"):
                return "create placement policy" if word == "PLACEMENT" else "create resource group"
            if word in ("AS", "SELECT", "("):
                break
        return "none"
    if first == "DROP" and rest:
        return {
            "DATABASE": "drop schema", "SCHEMA": "drop schema", "TABLE": "drop table",
            "TEMPORARY": "drop table", "VIEW": "drop view", "INDEX": "drop index",
            "SEQUENCE": "drop sequence",
        }.get(rest[0], "none")
    if first == "TRUNCATE":
        return "truncate table"
    if first == "RENAME":
        # RENAME TABLE a TO b[, c TO d]: the tokenizer may fold the tail into one string
        text = query.upper()
        return "rename tables" if text.count(" TO ") > 1 or "," in text else "rename table"
    if first in ("RECOVER", "FLASHBACK"):
        return "recover table" if "TABLE" in rest else "flashback schema"
    if first == "ALTER" and rest:
        if rest[0] in ("DATABASE", "SCHEMA"):
            return "modify schema charset and collate"
        if rest[0] == "SEQUENCE":
            return "alter sequence"
        if "TABLE" in rest[:2]:
            start = rest.index("TABLE") + 3  # ALTER, TABLE, name
            specs = _split_specs(w[start:], top[start:])
            if len(specs) > 1:
                return "alter table multi-schema change"
            return _alter_spec(specs[0]) if specs else "none"
    return "none"


def _split_specs(words: list[str], top: list[bool]) -> list[list[str]]:
    specs, current = [], []
    for word, at_top in zip(words, top):
        if word == "," and at_top:
            specs.append(current)
            current = []
        else:
            current.append(word)
    if current:
        specs.append(current)
    return [s for s in specs if s]


def _alter_spec(s: list[str]) -> str:
    head = s[0]
    nxt = s[1] if len(s) > 1 else ""
    if head == "ADD":
        if nxt == "CONSTRAINT":
            kinds = {"PRIMARY": "add primary key", "FOREIGN": "add foreign key", "CHECK": "add check constraint"}
            for word in s[2:5]:
                if word in kinds:
                    return kinds[word]
            return "add index"
        return {
            "INDEX": "add index", "KEY": "add index", "UNIQUE": "add index", "FULLTEXT": "add index",
            "SPATIAL": "add index", "PRIMARY": "add primary key", "FOREIGN": "add foreign key",
            "PARTITION": "add partition", "CHECK": "add check constraint",
        }.get(nxt, "add column")
    if head == "DROP":
        return {
            "INDEX": "drop index", "KEY": "drop index", "PRIMARY": "drop primary key",
            "FOREIGN": "drop foreign key", "PARTITION": "drop partition",
            "CHECK": "drop check constraint", "CONSTRAINT": "drop check constraint",
        }.get(nxt, "drop column")
    if head in ("MODIFY", "CHANGE"):
        return "modify column"
    if head == "ALTER":
        if nxt == "INDEX":
            return "alter index visibility"
        if nxt == "CHECK":
            return "alter check constraint"
        return "set default value"
    if head == "RENAME":
        if nxt == "COLUMN":
            return "modify column"
        if nxt in ("INDEX", "KEY"):
            return "rename index"
        return "rename table"
    if head == "COMMENT":
        return "modify table comment"
    if head in ("CHARACTER", "CHARSET", "COLLATE", "CONVERT") or (
        head == "DEFAULT" and nxt in ("CHARACTER", "CHARSET", "COLLATE")
    ):
        return "modify table charset and collate"
    if head == "AUTO_INCREMENT":
        return "rebase auto_increment ID"
    if head == "AUTO_RANDOM_BASE":
        return "rebase auto_random ID"
    if head == "SHARD_ROW_ID_BITS":
        return "shard row ID"
    if head == "AUTO_ID_CACHE":
        return "modify auto id cache"
    if head in ("TRUNCATE", "EXCHANGE", "REORGANIZE") and nxt == "PARTITION":
        return {"TRUNCATE": "truncate partition", "EXCHANGE": "exchange partition",
                "REORGANIZE": "alter table reorganize partition"}[head]
    if head == "PARTITION" and nxt == "BY":
        return "alter table partition by"
    if head == "REMOVE":
        return "alter table remove partitioning"
    if head == "SET" and nxt == "TIFLASH":
        return "set tiflash replica"
    if head == "TTL":
        return "alter table ttl"
    if head == "NO_TTL":
        return "alter table no_ttl"
    if head == "CACHE":
        return "alter table cache"
    if head == "NOCACHE":
        return "alter table nocache"
    return "none"
