"""Binary wire format for node-set server calls.

One payload is laid out as::

    b"ACW1" | uint32 LE header length | header (UTF-8 JSON) | buffer 0 | buffer 1 | ...

The header is ``{"v": <tree>, "b": [nbytes of buffer 0, nbytes of buffer 1, ...]}``. The tree
is plain JSON except for tagged objects, which carry the reserved key ``"$w"``:

- ``{"$w": "nd", "dtype": "<f4", "shape": [64, 64, 3], "buf": 0}``: a numpy array whose
  C-order bytes are buffer 0 (``"np"`` instead of ``"nd"``: a numpy scalar of that dtype);
- ``{"$w": "bytes", "buf": 1}``: a ``bytes`` value;
- ``{"$w": "f", "v": "nan" | "inf" | "-inf"}``: a non-finite float (the header is strict JSON);
- ``{"$w": "dict", "v": {...}}``: a user dict that itself contains the key ``"$w"``.

Arrays never pass through JSON element by element, so encode and decode cost a few
microseconds plus one copy of the array bytes each way. Decoded arrays own their memory and
are writable; numpy scalars decode as numpy scalars of the same dtype; tuples decode as lists.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np

from agentcanvas.errors import WireError

__all__ = ["WIRE_CONTENT_TYPE", "decode", "encode"]

WIRE_CONTENT_TYPE = "application/x-agentcanvas-wire"

_MAGIC = b"ACW1"
_PREFIX = struct.Struct("<4sI")
_TAG = "$w"
# bool, signed and unsigned ints, floats, complex: every dtype whose bytes are its value.
_ARRAY_KINDS = frozenset("biufc")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def encode(obj: object) -> bytes:
    """Encode a JSON-like tree with numpy arrays and bytes into one wire payload.

    Raises WireError naming the path (e.g. ``outputs.obs[2]``) of the first value that cannot
    travel: arbitrary objects, non-str dict keys, arrays of non-numeric dtype.
    """
    buffers: list[memoryview] = []
    try:
        tree = _encode_node(obj, "", buffers)
    except RecursionError as exc:
        raise WireError("cannot encode: the value nests too deeply or contains a cycle") from exc
    header = json.dumps(
        {"v": tree, "b": [buf.nbytes for buf in buffers]},
        separators=(",", ":"),
        allow_nan=False,
    ).encode()
    return b"".join([_PREFIX.pack(_MAGIC, len(header)), header, *buffers])


def decode(data: bytes) -> object:
    """Decode a payload made by `encode`; raises WireError when it is truncated or garbled."""
    view = memoryview(data).cast("B")
    header, buffers = _split_payload(view)
    try:
        return _decode_node(header, buffers)
    except (KeyError, TypeError, ValueError, IndexError, RecursionError) as exc:
        raise WireError(f"garbled wire payload: {exc!r}") from exc


# --- encoding -------------------------------------------------------------------------------


def _encode_node(obj: object, path: str, buffers: list[memoryview]) -> object:
    # Exact type checks first: the common case costs no isinstance walk over the MRO.
    if obj is None or type(obj) is str or type(obj) is int or type(obj) is bool:
        return obj
    if type(obj) is float:
        return obj if math.isfinite(obj) else {_TAG: "f", "v": str(obj)}
    if type(obj) is dict:
        return _encode_dict(obj, path, buffers)
    if type(obj) is list or type(obj) is tuple:
        return [_encode_node(item, f"{path}[{i}]", buffers) for i, item in enumerate(obj)]
    if type(obj) is np.ndarray:
        return _encode_array(obj, path, buffers, "nd")
    return _encode_other(obj, path, buffers)


def _encode_other(obj: object, path: str, buffers: list[memoryview]) -> object:
    """Slow path: numpy scalars, bytes, array subclasses and subclasses of the plain types."""
    if isinstance(obj, np.generic):
        if isinstance(obj, np.str_ | np.bytes_):
            return _encode_node(obj.item(), path, buffers)
        return _encode_array(np.asarray(obj), path, buffers, "np")
    if isinstance(obj, bytes | bytearray | memoryview):
        buffers.append(memoryview(bytes(obj)))
        return {_TAG: "bytes", "buf": len(buffers) - 1}
    if isinstance(obj, np.ma.MaskedArray):
        raise WireError(f"cannot encode a masked array at {_where(path)}: send data and mask")
    if isinstance(obj, np.ndarray):
        return _encode_array(np.asarray(obj), path, buffers, "nd")
    # Subclasses of the plain types (IntEnum, StrEnum, OrderedDict, ...) travel as plain values.
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return _encode_node(float(obj), path, buffers)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, dict):
        return _encode_dict(obj, path, buffers)
    if isinstance(obj, list | tuple):
        return _encode_node(list(obj), path, buffers)
    raise WireError(f"cannot encode {type(obj).__qualname__} at {_where(path)}")


def _encode_dict(obj: dict[object, object], path: str, buffers: list[memoryview]) -> object:
    out: dict[str, object] = {}
    for key, value in obj.items():
        if not isinstance(key, str):
            raise WireError(f"cannot encode dict key {key!r} at {_where(path)}: keys must be str")
        key = key if type(key) is str else str.__str__(key)
        out[key] = _encode_node(value, f"{path}.{key}" if path else key, buffers)
    if _TAG in out:
        return {_TAG: "dict", "v": out}
    return out


def _encode_array(
    arr: np.ndarray[Any, Any], path: str, buffers: list[memoryview], tag: str
) -> object:
    if arr.dtype.kind not in _ARRAY_KINDS:
        raise WireError(f"cannot encode dtype {arr.dtype} at {_where(path)}: not numeric")
    # np.ascontiguousarray would turn a 0-d array into 1-d; copy(order="C") keeps the shape.
    contiguous = arr if arr.flags.c_contiguous else arr.copy(order="C")
    buffers.append(contiguous.reshape(-1).view(np.uint8).data)
    return {
        _TAG: tag,
        "dtype": arr.dtype.str,
        "shape": list(arr.shape),
        "buf": len(buffers) - 1,
    }


def _where(path: str) -> str:
    return path or "<root>"


# --- decoding -------------------------------------------------------------------------------


def _split_payload(view: memoryview) -> tuple[object, list[memoryview]]:
    """Check the framing and return the header tree and one view per buffer."""
    if view.nbytes < _PREFIX.size:
        raise WireError(f"truncated wire payload: {view.nbytes} bytes, no header")
    magic, header_len = _PREFIX.unpack_from(view)
    if magic != _MAGIC:
        raise WireError(f"not an agentcanvas wire payload (magic {bytes(magic)!r})")
    header_end = _PREFIX.size + header_len
    if header_end > view.nbytes:
        raise WireError(f"truncated wire payload: header needs {header_end} bytes")
    try:
        header = json.loads(view[_PREFIX.size : header_end].tobytes())
        tree, sizes = header["v"], header["b"]
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise WireError(f"garbled wire header: {exc!r}") from exc
    if not isinstance(sizes, list) or not all(_is_count(n) for n in sizes):
        raise WireError("garbled wire header: buffer sizes are not a list of counts")
    expected = header_end + sum(sizes)
    if expected != view.nbytes:
        raise WireError(f"wire payload of {view.nbytes} bytes, header announces {expected}")
    buffers: list[memoryview] = []
    offset = header_end
    for size in sizes:
        buffers.append(view[offset : offset + size])
        offset += size
    return tree, buffers


def _decode_node(node: object, buffers: list[memoryview]) -> object:
    if type(node) is dict:
        tag = node.get(_TAG)
        if tag is None:
            return {k: _decode_node(v, buffers) for k, v in node.items()}
        return _decode_tagged(tag, node, buffers)
    if type(node) is list:
        return [_decode_node(item, buffers) for item in node]
    return node


def _decode_tagged(tag: object, node: dict[str, Any], buffers: list[memoryview]) -> object:
    if tag == "nd":
        return _decode_array(node, buffers)
    if tag == "np":
        return _decode_array(node, buffers)[()]
    if tag == "bytes":
        return bytes(_buffer(node["buf"], buffers))
    if tag == "f":
        return _NONFINITE[node["v"]]
    if tag == "dict":
        inner = node["v"]
        if type(inner) is not dict:
            raise WireError("garbled wire payload: escaped dict is not an object")
        return {k: _decode_node(v, buffers) for k, v in inner.items()}
    raise WireError(f"garbled wire payload: unknown tag {tag!r}")


def _decode_array(node: dict[str, Any], buffers: list[memoryview]) -> np.ndarray[Any, Any]:
    dtype = np.dtype(node["dtype"])
    if dtype.kind not in _ARRAY_KINDS:
        raise WireError(f"garbled wire payload: array dtype {dtype} is not allowed")
    shape = node["shape"]
    if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
        raise WireError(f"garbled wire payload: bad array shape {shape!r}")
    buf = _buffer(node["buf"], buffers)
    if buf.nbytes != dtype.itemsize * math.prod(shape):
        raise WireError(
            f"garbled wire payload: {buf.nbytes} bytes for an array {dtype}{tuple(shape)}"
        )
    # The copy makes the array own aligned, writable memory instead of pinning the payload.
    return np.frombuffer(buf, dtype=dtype).reshape(shape).copy()


def _buffer(index: object, buffers: list[memoryview]) -> memoryview:
    if type(index) is not int or not 0 <= index < len(buffers):
        raise WireError(f"garbled wire payload: bad buffer index {index!r}")
    return buffers[index]


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0
