"""Wire format of node-set server messages: msgpack (msgspec) plus raw numpy buffers.

A message is a list of frames (one message on the call socket, `server.rpc_framing`)::

    frame 0: msgpack of the value tree | frame 1: buffer 1 | frame 2: buffer 2 | ...

The tree is plain msgpack (None, bool, int, float — NaN and ±inf included —, str, bytes, lists,
maps) plus three extension types:

- ``EXT_ARRAY``: a numpy array, as msgpack ``[dtype.str, shape, data]`` where ``data`` is the
  C-order bytes of a small array (inline) or the index of the frame holding them (arrays of
  ``INLINE_MAX_BYTES`` or more travel as their own frame, never copied on the way out);
- ``EXT_SCALAR``: a numpy scalar, ``[dtype.str, bytes]``; it decodes as a numpy scalar;
- ``EXT_BIGINT``: an int outside msgpack's 64-bit range, as its decimal text.

So an array round trip is bit-exact (dtype, shape and raw bytes) for every numeric dtype, byte
order included. Decoded arrays own aligned, writable memory; tuples and sets decode as lists;
subclasses of the plain types (IntEnum, StrEnum, OrderedDict) travel as plain values. A value
that cannot travel is a WireError naming its path (e.g. ``outputs.obs[2]``); a truncated or
garbled message is a WireError too. A `Decoder` decodes straight into a msgspec type (a Struct:
``server.protocol``'s replies) in the same pass. `dumps` / `loads` are the
one-buffer form (every array inline) for HTTP bodies.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np

from agentcanvas.errors import WireError

__all__ = ["WIRE_CONTENT_TYPE", "Buffer", "Decoder", "decode", "dumps", "encode", "loads"]

WIRE_CONTENT_TYPE = "application/x-agentcanvas-msgpack"
INLINE_MAX_BYTES = 1024
EXT_ARRAY, EXT_SCALAR, EXT_BIGINT = 1, 2, 3

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")
# bool, signed and unsigned ints, floats, complex: every dtype whose bytes are its value.
_ARRAY_KINDS = frozenset("biufc")
_PLAIN = (type(None), bool, int, float, str, bytes, bytearray)


class _BigInt:
    """Marks an int msgpack cannot hold, for the encoder's hook."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


class _Encoding(threading.local):
    frames: list[Buffer]
    inline_max: float


_state = _Encoding()
_packer = msgspec.msgpack.Encoder()


def _enc_hook(obj: Any) -> Any:
    if type(obj) is np.ndarray:
        return _array_ext(obj)
    if isinstance(obj, np.generic) and not isinstance(obj, np.str_ | np.bytes_):
        if obj.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"dtype {obj.dtype}")
        return msgspec.msgpack.Ext(EXT_SCALAR, _packer.encode([obj.dtype.str, obj.tobytes()]))
    if isinstance(obj, np.ma.MaskedArray):
        raise TypeError("masked array")
    if isinstance(obj, np.ndarray):
        return _array_ext(np.asarray(obj))
    if isinstance(obj, _BigInt):
        return msgspec.msgpack.Ext(EXT_BIGINT, str(obj.value).encode())
    for plain in (int, float, str):  # subclasses of the plain types travel as plain values
        if isinstance(obj, plain):
            return plain(obj)
    if isinstance(obj, np.str_ | np.bytes_):
        return obj.item()
    if isinstance(obj, memoryview):
        return obj.tobytes()
    raise TypeError(type(obj).__qualname__)


def _array_ext(arr: np.ndarray[Any, Any]) -> msgspec.msgpack.Ext:
    if arr.dtype.kind not in _ARRAY_KINDS:
        raise TypeError(f"dtype {arr.dtype}")
    # np.ascontiguousarray would turn a 0-d array into 1-d; copy(order="C") keeps the shape.
    contiguous = arr if arr.flags.c_contiguous else arr.copy(order="C")
    data: bytes | int
    if arr.nbytes < _state.inline_max:
        data = contiguous.tobytes()
    else:
        _state.frames.append(contiguous.reshape(-1).view(np.uint8).data)
        data = len(_state.frames) - 1
    return msgspec.msgpack.Ext(EXT_ARRAY, _packer.encode([arr.dtype.str, arr.shape, data]))


_encoder = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


def encode(obj: object, inline_max_bytes: float = INLINE_MAX_BYTES) -> list[Buffer]:
    """The frames of one message: msgpack header, then the large arrays' raw buffers."""
    frames: list[Buffer] = [b""]
    _state.frames, _state.inline_max = frames, inline_max_bytes
    try:
        frames[0] = _encoder.encode(obj)
    except OverflowError:
        del frames[1:]
        frames[0] = _encoder.encode(_widen(obj))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _located(obj, exc) from exc
    finally:
        _state.frames = []
    return frames


def dumps(obj: object) -> bytes:
    """One buffer: `encode` with every array inline."""
    (frame,) = encode(obj, math.inf)
    return bytes(frame)


def _widen(obj: object) -> object:
    """A copy of the tree with every int outside msgpack's range marked for EXT_BIGINT."""
    if type(obj) is int or (isinstance(obj, int) and not isinstance(obj, bool | enum.Enum)):
        value = int(obj)
        return _BigInt(value) if not -(2**63) <= value < 2**64 else value
    if isinstance(obj, dict):
        return {k: _widen(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_widen(v) for v in obj]
    return obj


def _located(obj: object, exc: BaseException) -> WireError:
    """The WireError for a failed encode, naming the path of the first bad value."""
    if isinstance(exc, RecursionError):
        return WireError("cannot encode: the value nests too deeply or contains a cycle")
    try:
        found = _first_bad(obj, "")
    except RecursionError:
        return WireError("cannot encode: the value nests too deeply or contains a cycle")
    if found is None:
        return WireError(f"cannot encode: {exc}")
    path, why = found
    hint = " (send data and mask)" if why == "masked array" else ""
    return WireError(f"cannot encode {why} at {path or '<root>'}{hint}")


def _first_bad(obj: object, path: str) -> tuple[str, str] | None:
    if isinstance(obj, (*_PLAIN, enum.Enum)):
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str | int | float | bool | type(None)):
                return path, f"dict key {key!r}"
            found = _first_bad(value, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(obj, list | tuple | set | frozenset):
        for i, item in enumerate(obj):
            if found := _first_bad(item, f"{path}[{i}]"):
                return found
        return None
    try:
        _enc_hook(obj)
    except (TypeError, ValueError) as exc:
        return path, str(exc)
    return None


# --- decoding -------------------------------------------------------------------------------


class _Decoding(threading.local):
    frames: Sequence[Buffer] = ()


_dstate = _Decoding()


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == EXT_ARRAY:
        dtype_str, shape, raw = _unpacker.decode(data)
        return _array(dtype_str, shape, raw)
    if code == EXT_SCALAR:
        dtype_str, raw = _unpacker.decode(data)
        return _array(dtype_str, [], raw)[()]
    if code == EXT_BIGINT:
        return int(bytes(data))
    raise WireError(f"garbled wire payload: unknown extension type {code}")


def _array(dtype_str: object, shape: object, raw: object) -> np.ndarray[Any, Any]:
    dtype = _DTYPES.get(dtype_str) if type(dtype_str) is str else None
    if dtype is None:
        dtype = _dtype(dtype_str)
    if type(shape) is not list:
        raise WireError(f"garbled wire payload: bad array shape {shape!r}")
    for n in shape:
        if type(n) is not int or n < 0:
            raise WireError(f"garbled wire payload: bad array shape {shape!r}")
    if type(raw) is int:
        frames = _dstate.frames
        if not 1 <= raw < len(frames):
            raise WireError(f"garbled wire payload: bad buffer index {raw}")
        buf: Buffer = frames[raw]
    elif isinstance(raw, bytes):
        buf = raw
    else:
        raise WireError("garbled wire payload: array data is neither bytes nor a frame index")
    nbytes = memoryview(buf).nbytes
    if nbytes != dtype.itemsize * math.prod(shape):
        raise WireError(f"garbled wire payload: {nbytes} bytes for an array {dtype}{tuple(shape)}")
    # The copy makes the array own aligned, writable memory instead of pinning the message
    # (or a shared-memory slot that the next reply reuses: `server.rpc_shared`).
    return np.ndarray(shape, dtype, buffer=buf).copy()


_unpacker = msgspec.msgpack.Decoder()
_DTYPES: dict[str, np.dtype[Any]] = {}  # dtype strings seen, allowed: parsed once each
_MAX_DTYPES = 256  # a peer's strings cannot grow it past this


def _dtype(dtype_str: object) -> np.dtype[Any]:
    """The array dtype a wire string names (WireError when it is not one we allow)."""
    if not isinstance(dtype_str, str):
        raise WireError(f"garbled wire payload: array dtype {dtype_str!r}")
    dtype = np.dtype(dtype_str)
    if dtype.kind not in _ARRAY_KINDS:
        raise WireError(f"garbled wire payload: array dtype {dtype} is not allowed")
    if len(_DTYPES) < _MAX_DTYPES:
        _DTYPES[dtype_str] = dtype
    return dtype


class Decoder(Generic[T]):
    """Decodes the frames made by `encode` straight into ``kind`` (a msgspec type: a Struct,
    ``dict[str, Any]``…) in one pass; WireError also when the value does not fit, naming the
    field (msgspec's words: ``Object missing required field `outputs` - at `$.ok```)."""

    __slots__ = ("_decoder",)

    def __init__(self, kind: type[T]) -> None:
        self._decoder = msgspec.msgpack.Decoder(kind, ext_hook=_ext_hook)

    def decode(self, frames: Sequence[Buffer]) -> T:
        if not frames:
            raise WireError("empty wire message: no header frame")
        _dstate.frames = frames
        try:
            value: T = self._decoder.decode(frames[0])
        except msgspec.ValidationError as exc:  # msgspec names the field
            raise WireError(str(exc)) from exc
        except msgspec.DecodeError as exc:
            raise WireError(f"garbled wire payload: {exc}") from exc
        except (TypeError, ValueError) as exc:  # a bad dtype string, a header of the wrong shape
            raise WireError(f"garbled wire payload: {exc!r}") from exc
        finally:
            _dstate.frames = ()
        return value


_any: Decoder[Any] = Decoder(Any)  # Any: msgspec's untyped decode


def decode(frames: Sequence[Buffer]) -> object:
    """Decode the frames made by `encode`; WireError when truncated or garbled."""
    return _any.decode(frames)


def loads(data: Buffer) -> object:
    """Decode one buffer made by `dumps`."""
    return decode([data])
