"""Conversion matrix: one rich canonical stream through every ordered pair of protocols.

For each pair (A, B) the stream (tests/codecs/matrix_stream.py, in a TiCDC shape and a Canal
shape) is encoded in A, decoded, encoded in B, decoded, and compared with
`B.expect(A.expect(stream))`: the original modulo exactly the losses tests/codecs/losses.py
lists. Every loss there cites the words of its docs/protocols page (checked here) and is needed
(dropping it breaks an expectation, checked here). Events a protocol refuses to encode (its
`refuses` rules) must raise EncodeError and are left out; nothing else may be lost. Chains of
three protocols and hypothesis-drawn streams run the same comparison.
"""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import EncodeError, codec_class, decode_record, encode_records, get_codec, protocols
from cdc_codecs.events import Kind, Op

from .. import strategies
from .losses import AVRO_SCHEMA_IDS, PROFILES, REGISTRY, Profile, content
from .matrix_stream import stream

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ["ticdc", "canal", "untimed"]


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> str:
    return "file://" + str(tmp_path_factory.mktemp("registry"))


def codec_for(profile: Profile, registry: str):
    options = {k: (registry if v == REGISTRY else v) for k, v in profile.options.items()}
    return get_codec(profile.protocol, options)


def trip(profile: Profile, events: list[dict], registry: str) -> list[dict]:
    """Encode `events` in the profile's protocol (one partition) and decode them again. Each
    event the profile refuses must raise EncodeError on its own; the rest are converted."""
    codec = codec_for(profile, registry)
    accepted = []
    for event in events:
        if profile.refused(event) is None:
            accepted.append(event)
        else:
            with pytest.raises(EncodeError):
                encode_records(codec, [event], topic="matrix", partitions=1)
    decoded = []
    for record in encode_records(codec, accepted, topic="matrix", partitions=1):
        decoded.extend(decode_record(codec, record))
    return [content(e) for e in decoded]


def comparable(events: list[dict]) -> list[dict]:
    """Registry-assigned schema ids are not content: any value compares equal."""
    out = []
    for event in events:
        extras = event["extras"]
        if extras and any(k in extras for k in AVRO_SCHEMA_IDS):
            event = {**event, "extras": {k: "*" if k in AVRO_SCHEMA_IDS else v for k, v in extras.items()}}
        out.append(event)
    return out


def assert_same(got: list[dict], want: list[dict], where: str) -> None:
    got, want = comparable(got), comparable(want)
    assert [(e["kind"], e["op"]) for e in got] == [(e["kind"], e["op"]) for e in want], where
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            fields = {k: (w[k], g[k]) for k in w if g[k] != w[k]}
            for side in ("before", "after"):
                if side in fields and g[side] and w[side] and len(g[side]) == len(w[side]):
                    fields[side] = [(wc, gc) for wc, gc in zip(w[side], g[side]) if wc != gc]
            pytest.fail(f"{where}: event {i} ({w['kind']} {w['op']}) differs, (expected, got): {fields}")


def chain(profiles: list[Profile], events: list[dict], registry: str) -> None:
    want, got = events, copy.deepcopy(events)
    for profile in profiles:
        want, got = profile.expect(want), trip(profile, got, registry)
    assert_same(got, want, " -> ".join(p.name for p in profiles))


# ------------------------------------------------------------------------------ the matrix

def test_every_registered_protocol_is_in_the_matrix():
    assert {p.protocol for p in PROFILES} == {p for p in protocols() if codec_class(p).writable}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_one_trip_loses_only_what_the_docs_say(profile, shape, registry):
    chain([profile], stream(shape), registry)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("first, second", list(itertools.product(PROFILES, repeat=2)), ids=lambda p: p.name)
def test_conversion(first, second, shape, registry):
    chain([first, second], stream(shape), registry)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("first", PROFILES, ids=lambda p: p.name)
def test_conversions_through_three_protocols(first, shape, registry):
    for second, third in itertools.product(PROFILES, repeat=2):
        chain([first, second, third], stream(shape), registry)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(strategies.events(commit_ts=True) | strategies.events(commit_ts=False), min_size=1, max_size=6),
       profiles=st.lists(st.sampled_from(PROFILES), min_size=2, max_size=3))
def test_conversion_of_any_events(events, profiles, registry):
    chain(profiles, events, registry)


# ------------------------------------------------------------------------------ the stream and the table

def test_the_stream_is_rich():
    events = stream()
    assert {e["kind"] for e in events} == {Kind.ROW, Kind.DDL, Kind.WATERMARK}
    assert {e["op"] for e in events} == {Op.INSERT, Op.UPDATE, Op.DELETE, None}
    assert all(e["commit_ts"] for e in events if e["kind"] != Kind.WATERMARK)
    columns = [c for e in events for side in ("before", "after") for c in e[side] or ()]
    values = {c["value"] for c in columns}
    assert {b"18446744073709551615", b"123456789012345678901234567890.0123456789", None} <= values
    assert any(c["label"] and "," in c["label"] for c in columns)  # a SET with labels
    assert any(c["value"] and b"\xff" in c["value"] for c in columns)  # arbitrary bytes
    assert any(
        [c["value"] for c in e["before"] if c["name"] == "id"] != [c["value"] for c in e["after"] if c["name"] == "id"]
        for e in events if e["op"] == Op.UPDATE)  # a primary-key-changing UPDATE
    assert not any(e["commit_ts"] for e in stream("canal"))


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_loss_is_stated_on_its_protocol_page(profile):
    for rule in profile.refuses + profile.losses:
        page = ROOT / rule.doc
        assert page.exists(), rule.doc
        assert _words(rule.says) in _words(page.read_text()), f"{rule.doc} does not say {rule.says!r}"




@pytest.fixture(scope="module")
def inputs():
    once = [stream(shape) for shape in SHAPES]
    twice = once + [p.expect(events) for p in PROFILES for events in once]
    return twice + [p.expect(events) for p in PROFILES for events in twice[len(once):]]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_loss_is_needed(profile, inputs):
    """A rule that changes no expectation is untested: the table lists only observed losses."""
    for rule in profile.losses:
        assert any(profile.expect(i) != profile.expect(i, without=rule) for i in inputs), f"{rule} is never needed"
    for rule in profile.refuses:
        assert any(rule.apply(e) for i in inputs for e in i), f"{rule} never refuses anything"
