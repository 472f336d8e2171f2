"""Round trips and failure modes of the binary wire format."""

from __future__ import annotations

import enum
import math
import timeit
from collections import OrderedDict
from typing import Any

import msgspec
import numpy as np
import pytest

from agentcanvas.errors import WireError
from agentcanvas.wire import (
    EXT_ARRAY,
    EXT_BIGINT,
    EXT_SCALAR,
    INLINE_MAX_BYTES,
    WIRE_CONTENT_TYPE,
    Decoder,
    decode,
    dumps,
    encode,
    loads,
)

NUMERIC_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    ">f4",
    ">i8",
]
SHAPES = [(), (0,), (3, 0, 2), (7,), (2, 3, 4)]


def roundtrip(obj: object) -> Any:
    """Both forms: frames (large arrays as their own frames) and one buffer (all inline)."""
    frames = encode(obj)
    assert isinstance(frames, list) and frames
    single = dumps(obj)
    assert isinstance(single, bytes)
    via_frames, via_single = decode(frames), loads(single)
    assert type(via_frames) is type(via_single)
    return via_frames


def random_array(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """An array whose bytes are random: every bit pattern of the dtype may occur."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    n_bytes = dtype.itemsize * math.prod(shape)
    raw = rng.integers(0, 256, size=n_bytes, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def assert_same_array(out: object, expected: np.ndarray) -> None:
    assert isinstance(out, np.ndarray)
    assert out.dtype == expected.dtype
    assert out.shape == expected.shape
    assert out.tobytes() == np.ascontiguousarray(expected).tobytes()  # bit-exact
    assert out.flags.writeable
    assert out.flags.owndata


def test_content_type() -> None:
    assert WIRE_CONTENT_TYPE == "application/x-agentcanvas-msgpack"


def test_large_arrays_travel_as_their_own_frames_small_ones_inline() -> None:
    big = np.zeros(INLINE_MAX_BYTES, dtype=np.uint8)
    small = np.zeros(INLINE_MAX_BYTES - 1, dtype=np.uint8)
    frames = encode({"big": big, "small": small, "big2": big.view(np.int32)})
    assert len(frames) == 3  # header + two frames: the small array is in the header
    assert [memoryview(f).nbytes for f in frames[1:]] == [big.nbytes, big.nbytes]
    assert len(dumps({"big": big})) > big.nbytes  # one buffer: inline


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype_name", NUMERIC_DTYPES)
def test_array_roundtrip_is_bit_exact(dtype_name: str, shape: tuple[int, ...]) -> None:
    array = random_array(np.dtype(dtype_name), shape)
    assert_same_array(roundtrip(array), array)


@pytest.mark.parametrize(
    "make_view",
    [
        lambda a: a[::2, 1:, ::-1],
        lambda a: a.T,
        lambda a: np.asfortranarray(a),
        lambda a: a[:, 1, :],
        lambda a: np.broadcast_to(a[:1], (5, 3, 4)),
        lambda a: a[1, 2, 3:4].reshape(()),
    ],
    ids=["strided", "transposed", "fortran", "middle-axis", "broadcast", "0-d-view"],
)
def test_non_contiguous_arrays_roundtrip(make_view: Any) -> None:
    view = make_view(np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) - 5.5)
    out = roundtrip(view)
    assert_same_array(out, view)
    np.testing.assert_array_equal(out, view)


def test_decoded_array_is_independent_of_payload() -> None:
    array = np.arange(1000, dtype=np.int64)
    frames = encode({"a": array})
    out = decode(frames)["a"]
    out[:] = -1  # writable, and writing does not touch the frames or the input
    assert decode(frames)["a"].tolist() == list(range(1000))
    assert array.tolist() == list(range(1000))


def test_special_floats_roundtrip() -> None:
    out = roundtrip({"neg_zero": -0.0, "values": [math.inf, -math.inf, math.nan, 1e-310, 0.1]})
    assert math.copysign(1.0, out["neg_zero"]) == -1.0
    assert out["values"][:2] == [math.inf, -math.inf]
    assert math.isnan(out["values"][2])
    assert out["values"][3:] == [1e-310, 0.1]
    array = np.array([-0.0, np.inf, -np.inf, np.nan, 5e-324], dtype=np.float64)
    assert_same_array(roundtrip(array), array)


def test_nested_tree_roundtrip() -> None:
    obs = np.zeros((4, 4, 3), dtype=np.uint8)
    tree = {
        "outputs": {"obs": [obs, obs[:2], {"mask": np.ones(3, dtype=bool)}], "done": False},
        "meta": ("a", 1, 2.5, None, True, [], {}),
        "unicode": 'ünïcødé \u2603 \n"quoted"',
        "big_int": 2**100,
        "neg": -(2**70),
    }
    out = roundtrip(tree)
    assert out["meta"] == ["a", 1, 2.5, None, True, [], {}]  # tuples come back as lists
    assert out["unicode"] == tree["unicode"]
    assert out["big_int"] == 2**100 and out["neg"] == -(2**70)
    assert out["outputs"]["done"] is False
    assert_same_array(out["outputs"]["obs"][0], obs)
    assert_same_array(out["outputs"]["obs"][1], obs[:2])
    assert_same_array(out["outputs"]["obs"][2]["mask"], np.ones(3, dtype=bool))


def test_top_level_scalars_roundtrip() -> None:
    values: list[object] = [None, True, 0, -7, 1.5, "", "x", [], {}]
    for value in values:
        out = roundtrip(value)
        assert out == value and type(out) is type(value)


def test_bytes_roundtrip() -> None:
    out = roundtrip({"empty": b"", "png": b"\x89PNG\x00\xff", "ba": bytearray(b"xy")})
    assert out == {"empty": b"", "png": b"\x89PNG\x00\xff", "ba": b"xy"}
    assert type(out["ba"]) is bytes


def test_numpy_scalars_decode_as_numpy_scalars_of_same_dtype() -> None:
    scalars: list[np.generic] = [
        np.float32(1.5),
        np.float16(-0.0),
        np.int64(-3),
        np.uint8(200),
        np.bool_(True),
    ]
    for value, out in zip(scalars, roundtrip(scalars), strict=True):
        assert type(out) is type(value)
        assert out.tobytes() == value.tobytes()


def test_subclasses_of_plain_types_travel_as_plain_values() -> None:
    class Color(enum.IntEnum):
        RED = 1

    class Name(enum.StrEnum):
        ALICE = "alice"

    out = roundtrip(OrderedDict(color=Color.RED, name=Name.ALICE, key={Name.ALICE: 1}))
    assert out == {"color": 1, "name": "alice", "key": {"alice": 1}}
    assert type(out["color"]) is int and type(out["name"]) is str


def test_user_dict_with_former_reserved_key_roundtrips() -> None:
    tree = {"$w": "nd", "buf": 0, "inner": [{"$w": "f", "v": "nan"}]}
    assert roundtrip(tree) == tree


def test_int_keys_and_sets_travel_as_msgpack_holds_them() -> None:
    assert roundtrip({"a": {1: "x"}, "s": {3}}) == {"a": {1: "x"}, "s": [3]}


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"outputs": {"obs": [1, 2, object()]}}, r"outputs\.obs\[2\]"),
        ({"x": np.array([1, None], dtype=object)}, r"dtype object at x\b"),
        ({"x": [np.array(["a", "b"])]}, r"at x\[0\]"),
        ({"s": [{1, object()}]}, r"at s\[0\]\[\d\]"),
        ([np.datetime64("2024-01-01")], r"at \[0\]"),
        (lambda: 0, r"at <root>"),
        ({"m": np.ma.masked_array([1, 2], mask=[False, True])}, r"masked array at m\b"),
    ],
)
def test_unencodable_values_name_their_path(value: object, path: str) -> None:
    with pytest.raises(WireError, match=path):
        encode(value)


def test_cyclic_value_is_a_wire_error() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(WireError, match="cycle"):
        encode(cyclic)


def test_every_truncation_is_a_wire_error() -> None:
    payload = dumps({"obs": np.arange(12, dtype=np.int16), "b": b"abc", "x": 1})
    for cut in range(len(payload)):
        with pytest.raises(WireError):
            loads(payload[:cut])
    with pytest.raises(WireError, match="trailing"):
        loads(payload + b"\x00")


def test_a_missing_or_short_frame_is_a_wire_error() -> None:
    header, buffer = encode({"obs": np.arange(1000, dtype=np.int16)})
    with pytest.raises(WireError, match="buffer index"):
        decode([header])
    with pytest.raises(WireError, match="bytes for an array"):
        decode([header, memoryview(buffer)[:-2]])
    with pytest.raises(WireError, match="no header"):
        decode([])


def ext(code: int, *fields: object) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, msgspec.msgpack.encode(list(fields)))


def message(tree: object) -> bytes:
    """A message built by hand, to feed the decoder what encode would never write."""
    return msgspec.msgpack.encode(tree)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\xc1", "garbled wire payload"),
        (message(msgspec.msgpack.Ext(9, b"")), "unknown extension type 9"),
        (message(ext(EXT_ARRAY, "O", [1], bytes(8))), "dtype"),
        (message(ext(EXT_ARRAY, "<f4", [3], bytes(4))), "bytes for an array"),
        (message(ext(EXT_ARRAY, "<f4", [-1], bytes(4))), "shape"),
        (message(ext(EXT_ARRAY, "<f4", [1], 3)), "buffer index"),
        (message(ext(EXT_ARRAY, "<f4", [1], 0)), "buffer index"),
        (message(ext(EXT_ARRAY, "junk!", [1], bytes(4))), "garbled"),
        (message(ext(EXT_ARRAY, "<f4", [1], "text")), "neither bytes nor a frame index"),
        (message(ext(EXT_ARRAY, "<f4")), "garbled"),
        (message(ext(EXT_SCALAR, "<f4", bytes(3))), "bytes for an array"),
        (message(msgspec.msgpack.Ext(EXT_BIGINT, b"huge")), "garbled"),
    ],
)
def test_garbled_payloads_are_wire_errors(payload: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        loads(payload)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    payload = dumps({"a": np.arange(3)})
    for data in (bytearray(payload), memoryview(payload)):
        assert loads(data)["a"].tolist() == [0, 1, 2]


class Outputs(msgspec.Struct):
    outputs: dict[str, Any]


def test_a_decoder_decodes_into_its_type_arrays_included() -> None:
    obs = np.arange(2000, dtype=np.int16).reshape(40, 50)  # its own frame
    frames = encode({"outputs": {"obs": obs, "small": np.int8(3)}})
    decoded = Decoder(Outputs).decode(frames)
    assert isinstance(decoded, Outputs)
    assert decoded.outputs["obs"].tobytes() == obs.tobytes()
    assert decoded.outputs["small"] == np.int8(3)


@pytest.mark.parametrize(
    ("tree", "match"),
    [
        ({"output": {}}, r"Object missing required field `outputs`$"),
        ({"outputs": [1]}, r"Expected `object`, got `array` - at `\$\.outputs`"),
        ([1], r"Expected `object`, got `array`$"),
    ],
)
def test_a_value_that_does_not_fit_the_decoders_type_names_the_field(
    tree: object, match: str
) -> None:
    with pytest.raises(WireError, match=match):
        Decoder(Outputs).decode(encode(tree))


def test_a_decoder_reports_garbled_payloads_as_decode_does() -> None:
    with pytest.raises(WireError, match="garbled wire payload"):
        Decoder(Outputs).decode([b"\xc1"])
    with pytest.raises(WireError, match="no header"):
        Decoder(Outputs).decode([])


def test_observation_roundtrip_costs_microseconds() -> None:
    obs = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    n_calls = 200
    best_s = min(timeit.repeat(lambda: decode(encode({"obs": obs})), number=n_calls, repeat=5))
    per_call_s = best_s / n_calls
    # ~20 us on a laptop; the bound only catches per-element Python work (milliseconds).
    assert per_call_s < 500e-6, f"encode+decode took {per_call_s * 1e6:.0f} us"
