"""Round trips and failure modes of the binary wire format."""

from __future__ import annotations

import enum
import json
import math
import struct
import timeit
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from agentcanvas.errors import WireError
from agentcanvas.server.wire import WIRE_CONTENT_TYPE, decode, encode

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
    payload = encode(obj)
    assert isinstance(payload, bytes)
    return decode(payload)


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
    assert WIRE_CONTENT_TYPE == "application/x-agentcanvas-wire"


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
    array = np.arange(10, dtype=np.int64)
    payload = encode({"a": array})
    out = decode(payload)["a"]
    out[:] = -1  # writable, and writing does not touch the payload or the input
    assert decode(payload)["a"].tolist() == list(range(10))
    assert array.tolist() == list(range(10))


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


def test_user_dict_with_reserved_key_roundtrips() -> None:
    tree = {"$w": "nd", "buf": 0, "inner": [{"$w": "f", "v": "nan"}]}
    assert roundtrip(tree) == tree


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"outputs": {"obs": [1, 2, object()]}}, r"outputs\.obs\[2\]"),
        ({"a": {1: "x"}}, r"key 1 at a\b"),
        ({"x": np.array([1, None], dtype=object)}, r"dtype object at x\b"),
        ({"x": [np.array(["a", "b"])]}, r"at x\[0\]"),
        ({"s": {1, 2}}, r"set at s\b"),
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
    payload = encode({"obs": np.arange(12, dtype=np.int16), "b": b"abc", "x": 1})
    for cut in range(len(payload)):
        with pytest.raises(WireError):
            decode(payload[:cut])
    with pytest.raises(WireError, match="announces"):
        decode(payload + b"\x00")


def frame(header: object, *buffers: bytes) -> bytes:
    """A payload built by hand, to feed the decoder headers encode would never write."""
    raw = json.dumps(header).encode()
    return b"ACW1" + struct.pack("<I", len(raw)) + raw + b"".join(buffers)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"XXXX" + struct.pack("<I", 2) + b"{}", "not an agentcanvas wire payload"),
        (b"ACW1" + struct.pack("<I", 5) + b"{nope", "garbled wire header"),
        (b"ACW1" + struct.pack("<I", 2) + b"\xff\xfe", "garbled wire header"),
        (frame([1, 2]), "garbled wire header"),
        (frame({"v": 1, "b": [-1]}), "buffer sizes"),
        (frame({"v": {"$w": "zz"}, "b": []}), "unknown tag"),
        (
            frame({"v": {"$w": "nd", "dtype": "O", "shape": [1], "buf": 0}, "b": [8]}, bytes(8)),
            "dtype",
        ),
        (
            frame({"v": {"$w": "nd", "dtype": "<f4", "shape": [3], "buf": 0}, "b": [4]}, bytes(4)),
            "bytes for an array",
        ),
        (
            frame({"v": {"$w": "nd", "dtype": "<f4", "shape": [-1], "buf": 0}, "b": [4]}, bytes(4)),
            "shape",
        ),
        (
            frame({"v": {"$w": "nd", "dtype": "<f4", "shape": [1], "buf": 3}, "b": [4]}, bytes(4)),
            "buffer index",
        ),
        (
            frame(
                {"v": {"$w": "nd", "dtype": "junk!", "shape": [1], "buf": 0}, "b": [4]}, bytes(4)
            ),
            "garbled",
        ),
        (frame({"v": {"$w": "bytes"}, "b": []}), "garbled"),
        (frame({"v": {"$w": "f", "v": "huge"}, "b": []}), "garbled"),
        (frame({"v": {"$w": "dict", "v": [1]}, "b": []}), "escaped dict"),
    ],
)
def test_garbled_payloads_are_wire_errors(payload: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        decode(payload)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    payload = encode({"a": np.arange(3)})
    for data in (bytearray(payload), memoryview(payload)):
        assert decode(data)["a"].tolist() == [0, 1, 2]


def test_observation_roundtrip_costs_microseconds() -> None:
    obs = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    n_calls = 200
    best_s = min(timeit.repeat(lambda: decode(encode({"obs": obs})), number=n_calls, repeat=5))
    per_call_s = best_s / n_calls
    # ~20 us on a laptop; the bound only catches per-element Python work (milliseconds).
    assert per_call_s < 500e-6, f"encode+decode took {per_call_s * 1e6:.0f} us"
