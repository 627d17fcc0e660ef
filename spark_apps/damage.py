"""Streaming decompression that keeps everything before damage and names the byte.

`storage.iter_pieces` reads `.zst`/`.zstd` (zstd frames), `.lz4` (lz4 frames) and `.snappy`/`.sz`
(snappy framing format) objects here; `.gz` has its own reader in storage (`_gunzip`, which
can copy zlib's state). A damaged object yields every decompressed byte before the damage,
then raises `storage.DamagedObject` with the compressed byte where decoding failed:

* truncated (the object ends inside a frame): the object's length, "truncated";
* corrupt (the decoder refuses a byte): that byte. The decoders cannot copy their state, so
  the damaged 64 KiB slice is found first, then the object is decoded again (read again:
  damage is rare) up to that slice and through it one byte at a time: the decoders emit a
  block as soon as it is complete, so every block before the damage comes out, as `lz4 -dc`,
  `zstd -dc` or gzip would give them;
* zero bytes: no frame at all ("empty object"), as for `.gz`.

Several frames concatenated in one object (appended uploads, `cat a.lz4 b.lz4`) read as one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

FEED = 64 << 10  # compressed bytes per decoder call: the slice a damage is first placed in

_WHAT = {"zstd": "zstd frame", "lz4": "lz4 frame", "snappy": "snappy stream"}


class _Decoder:
    """One compression's decoder over a stream of frames: feed(bytes) -> bytes (raises on
    corrupt data); `inside` is True while a frame (or chunk) is incomplete."""

    def __init__(self, method: str):
        self.method = method
        self._new()

    def _new(self) -> None:
        if self.method == "zstd":
            import zstandard

            self._d = zstandard.ZstdDecompressor().decompressobj()
        elif self.method == "lz4":
            import lz4.frame

            self._d = lz4.frame.LZ4FrameDecompressor()
        elif self.method == "snappy":
            import snappy

            self._d = snappy.StreamDecompressor()
        else:
            raise ValueError(f"no streaming decoder for {self.method!r}")
        self.inside = False

    def feed(self, data: bytes) -> bytes:
        if self.method == "snappy":
            out = self._d.decompress(data)
            self.inside = bool(self._d.remains)
            return out
        outs = []
        while data:
            self.inside = True
            outs.append(self._d.decompress(data))
            if not self._d.eof:
                break
            data = self._d.unused_data  # the next frame starts here
            self._new()
        return b"".join(outs)


def _slices(chunks: Iterator[bytes], size: int) -> Iterator[bytes]:
    for chunk in chunks:
        for start in range(0, len(chunk), size):
            yield chunk[start:start + size]


def decode(method: str, chunks: Callable[[], Iterator[bytes]], damaged: type) -> Iterator[bytes]:
    """The decompressed pieces of the object whose compressed bytes `chunks()` yields (called
    again to re-read it when it is damaged); raises `damaged(byte_offset, reason)` after
    yielding everything before the damage."""
    position = 0  # compressed bytes fed without error
    emitted = 0  # decompressed bytes yielded
    decoder = _Decoder(method)
    for piece in _slices(chunks(), FEED):
        try:
            out = decoder.feed(piece)
        except Exception as e:  # noqa: BLE001 - each library has its own error type
            yield from _place(method, chunks, position, len(piece), emitted, damaged, e)
            raise AssertionError("unreachable")  # _place always raises
        position += len(piece)
        if out:
            emitted += len(out)
            yield out
    if position == 0:
        raise damaged(0, f"empty object: a compressed object of zero bytes holds no {_WHAT[method]}")
    if decoder.inside:
        raise damaged(position, f"truncated: the object ends inside a {_WHAT[method]}")


def _place(method: str, chunks, position: int, length: int, emitted: int, damaged: type,
           first: Exception) -> Iterator[bytes]:
    """Decode again up to `position` (the output there was yielded already), then the `length`
    bytes of the slice that failed one at a time: yield what comes out before the byte the
    decoder refuses, and raise there."""
    decoder = _Decoder(method)
    seen = 0  # compressed bytes fed again
    skip = emitted  # decompressed bytes already yielded
    for piece in _slices(chunks(), FEED):
        if seen < position:
            head = piece[: position - seen]
            skip -= len(decoder.feed(head))
            seen += len(head)
            piece = piece[len(head):]
        for i in range(len(piece)):
            if seen >= position + length:
                break
            try:
                out = decoder.feed(piece[i:i + 1])
            except Exception as e:  # noqa: BLE001
                raise damaged(seen, f"corrupt {method} data ({_reason(e)})") from None
            seen += 1
            if skip > 0:  # (only if the second decode cut its output differently)
                cut = min(skip, len(out))
                out, skip = out[cut:], skip - cut
            if out:
                yield out
        if seen >= position + length:
            break
    raise damaged(position, f"corrupt {method} data ({_reason(first)})")


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
