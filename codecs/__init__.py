"""cdc_codecs: decode and encode CDC messages (TiCDC, Canal, OceanBase) as canonical events.

The folder is `codecs/`, installed as the package `cdc_codecs` because the standard library
owns the name `codecs`. Importing the package registers every protocol.
"""

from .base import (
    Codec,
    EncodedMessage,
    KafkaRecord,
    Option,
    codec_class,
    decode_record,
    encode_records,
    get_codec,
    parse_option_pairs,
    protocols,
)
from .errors import CodecError, ConfigError, DecodeError, EncodeError
from .events import EVENT_SCHEMA, ColumnFlag, Kind, Op, column, new_event

from . import canal_json  # noqa: E402,F401  (registers the protocol)
from . import open_protocol  # noqa: E402,F401  (registers the protocol)
from . import avro  # noqa: E402,F401  (registers the protocol)
from . import canal_protobuf  # noqa: E402,F401  (registers the protocol)
from . import oceanbase_avro  # noqa: E402,F401  (registers the protocol)
from . import craft  # noqa: E402,F401  (registers the protocol)
from . import ticdc_csv  # noqa: E402,F401  (registers the protocol)

__all__ = [
    "Codec", "EncodedMessage", "KafkaRecord", "Option", "codec_class", "decode_record",
    "encode_records", "get_codec", "parse_option_pairs", "protocols", "CodecError",
    "ConfigError", "DecodeError", "EncodeError", "EVENT_SCHEMA", "ColumnFlag", "Kind", "Op",
    "column", "new_event",
]
