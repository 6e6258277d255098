"""Which message types a bag can decode, and the rosbags typestore that decodes them.

Definitions stored in the bag win (they are what the recorder saw). Types the bag does not define
come from the standard typestores, the bag's own ROS distro first, then the others in an order
that favours the long-term-support releases. A type no store knows is reported undecodable; it
never stops the other topics from being read.
"""
from __future__ import annotations

import os
import struct
import sys
from functools import cache, lru_cache
from pathlib import Path

from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_types_from_idl, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from .storage import Connection

_FALLBACK_ORDER = (
    Stores.ROS2_HUMBLE, Stores.ROS2_JAZZY, Stores.ROS2_KILTED, Stores.ROS2_IRON, Stores.ROS2_GALACTIC,
    Stores.ROS2_FOXY,
)
_DISTRO_STORES = {store.value.removeprefix("ros2_"): store for store in _FALLBACK_ORDER}
IDL_SEPARATOR = "=" * 80 + "\n"


@cache
def _base_store(store: Stores) -> Typestore:
    # Cached and never mutated: bag typestores copy what they need from it.
    return get_typestore(store)


def store_order(ros_distro: str = "") -> list[Stores]:
    """Standard typestores to try, the bag's distro (if known) first."""
    first = _DISTRO_STORES.get(ros_distro.strip().lower())
    return ([first] if first else []) + [s for s in _FALLBACK_ORDER if s != first]


def types_from_definition(conn: Connection) -> dict:
    """rosbags type dict from a definition stored in the bag ({} when none; raises when unparsable)."""
    if not conn.msgdef:
        return {}
    return dict(_parse_definition(conn.msgtype, conn.msgdef, conn.msgdef_encoding))


@lru_cache(maxsize=512)
def _parse_definition(msgtype: str, text: str, encoding: str) -> dict:
    # Parsing a definition costs ~10 ms; bags of one project repeat the same few definitions.
    if encoding == "ros2idl":
        types: dict = {}
        if text.startswith(IDL_SEPARATOR + "IDL: "):
            for part in text.split(IDL_SEPARATOR)[1:]:
                _header, _, idl = part.partition("\n")
                types.update(get_types_from_idl(idl))
        else:
            types.update(get_types_from_idl(text))
        return types
    return dict(get_types_from_msg(text, msgtype))


class BagTypes:
    """The typestore of one bag plus, per type, whether it decodes and why not."""

    def __init__(self, connections: list[Connection], ros_distro: str = "") -> None:
        self.typestore = Typestore()
        self.notes: dict[str, str] = {}
        self._decodable: dict[str, bool] = {}
        self._add_stored_definitions(connections)
        self._fill_from_standard_stores({c.msgtype for c in connections if c.msgtype}, ros_distro)

    def _add_stored_definitions(self, connections: list[Connection]) -> None:
        for conn in connections:
            if not conn.msgdef or conn.msgtype in self.typestore.fielddefs:
                continue
            try:
                types = types_from_definition(conn)
                self.typestore.register({k: v for k, v in types.items() if k not in self.typestore.fielddefs})
            except Exception as err:  # noqa: BLE001 - a bad stored definition only loses that type
                self.notes[conn.msgtype] = f"stored definition unusable ({err}); using a standard typestore"

    def _fill_from_standard_stores(self, msgtypes: set[str], ros_distro: str) -> None:
        missing = self._missing(msgtypes)
        for store in store_order(ros_distro):
            if not missing:
                break
            base = _base_store(store)
            for name, fields in base.fielddefs.items():
                if name not in self.typestore.fielddefs:
                    self.typestore.fielddefs[name] = fields
                    self.typestore.types[name] = base.types[name]
            missing = self._missing(msgtypes)

    def _missing(self, msgtypes: set[str]) -> set[str]:
        return {t for t in msgtypes if not self._resolves(t, set())}

    def _resolves(self, msgtype: str, seen: set[str]) -> bool:
        """True when the type and every type it nests are defined."""
        if msgtype in seen:
            return True
        seen.add(msgtype)
        entry = self.typestore.fielddefs.get(msgtype)
        if entry is None:
            return False
        return all(self._resolves(name, seen) for name in _nested_type_names(entry[1]))

    def candidates(self, msgtype: str) -> list[tuple[str, Typestore]]:
        """Typestores able to decode `msgtype`, best first: the bag's own (stored definitions), then
        each standard store with a different definition. Stored definitions can be wrong (rosbag2's
        own test bags store stubs), so a reader falls back along this list when the data disagree."""
        out: list[tuple[str, Typestore]] = []
        seen: set[str] = set()
        if self.decodable(msgtype):
            out.append(("bag", self.typestore))
            seen.add(_signature(self.typestore, msgtype))
        for store in store_order():
            base = _base_store(store)
            if msgtype not in base.fielddefs:
                continue
            signature = _signature(base, msgtype)
            if signature and signature not in seen:
                seen.add(signature)
                out.append((store.value, base))
        return out

    def decoder(self, msgtype: str) -> TopicDecoder:
        return TopicDecoder(msgtype, self.candidates(msgtype))

    def decodable(self, msgtype: str) -> bool:
        """Whether the type and every type it nests are defined (deserializers are built lazily)."""
        if msgtype not in self._decodable:
            ok = bool(msgtype) and self._resolves(msgtype, set())
            if not ok and msgtype and msgtype not in self.notes:
                self.notes[msgtype] = "no stored definition and no standard typestore knows this type"
            self._decodable[msgtype] = ok
        return self._decodable[msgtype]


def _nested_type_names(fields: list) -> list[str]:
    """Names of the message types used by a rosbags field list (NAME, SEQUENCE, ARRAY of NAME)."""
    names = []
    for _fieldname, desc in fields:
        names.extend(_names_in_desc(desc))
    return names


def _names_in_desc(desc: tuple) -> list[str]:
    # rosbags field descriptors: (Nodetype.BASE, (type, bound)), (Nodetype.NAME, 'pkg/msg/T'),
    # (Nodetype.ARRAY | SEQUENCE, (inner_desc, size)).
    kind, arg = desc
    if kind == Nodetype.NAME and isinstance(arg, str):
        return [arg]
    if kind in (Nodetype.ARRAY, Nodetype.SEQUENCE):
        return _names_in_desc(arg[0])
    return []


# Bytes a correct definition may leave unread at the end of a CDR message: rosbags allows only
# alignment padding (3), but Fast CDR pads after trailing empty sequences of 8-byte elements (a
# Kilted JointState with empty velocity/effort carries 8 extra bytes). A wrong definition (the stub
# definitions rosbag2 stores in its test bags) leaves far more and is rejected.
MAX_TRAILING_BYTES = 15


def deserialize_cdr(store: Typestore, data: bytes | memoryview, msgtype: str) -> object:
    """CDR bytes -> rosbags message; tolerates up to MAX_TRAILING_BYTES of trailing padding."""
    if len(data) < 4 or bytes(data[:2]) not in (b"\x00\x00", b"\x00\x01"):
        raise ValueError(f"invalid or unsupported CDR encapsulation {bytes(data[:4])!r}")
    msgdef = store.get_msgdef(msgtype)
    func = msgdef.deserialize_cdr_le if data[1] else msgdef.deserialize_cdr_be
    try:
        message, end = func(memoryview(data)[4:], 0, msgdef.cls, store)
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as err:
        raise ValueError(f"could not deserialize {msgtype}: {err}") from err
    left = len(data) - 4 - end
    if left > MAX_TRAILING_BYTES:
        raise ValueError(f"{msgtype}: {left} bytes left over after the message; the definition does not match")
    return message


def _signature(store: Typestore, msgtype: str) -> str:
    try:
        return store.generate_msgdef(msgtype, ros_version=2)[0]
    except Exception:  # noqa: BLE001 - an unusable definition has no signature
        return ""


class TopicDecoder:
    """Deserializes one type, switching to the next candidate definition when the data disagree."""

    def __init__(self, msgtype: str, candidates: list[tuple[str, Typestore]]) -> None:
        self.msgtype = msgtype
        self.candidates = candidates
        self.active = 0
        self.switched_to = ""  # the store it fell back to, for reporting

    @property
    def usable(self) -> bool:
        return bool(self.candidates)

    def decode(self, data: bytes | memoryview) -> object:
        """The message, or raises the first candidate's error when no candidate decodes it."""
        if not self.candidates:
            raise KeyError(f"no definition of {self.msgtype}")
        try:
            return deserialize_cdr(self.candidates[self.active][1], data, self.msgtype)
        except Exception as first_error:
            for i, (label, store) in enumerate(self.candidates):
                if i == self.active:
                    continue
                try:
                    msg = deserialize_cdr(store, data, self.msgtype)
                except Exception:  # noqa: BLE001, S112 - try the next definition
                    continue
                self.active, self.switched_to = i, label
                return msg
            raise first_error


def _find_msg_file(package: str, short: str) -> Path:
    """share/<package>/msg/<short>.msg under the ament prefixes (colcon / apt install) or this
    Python environment's prefix (pip wheels install message packages there)."""
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    for prefix in prefixes:
        path = Path(prefix) / "share" / package / "msg" / f"{short}.msg"
        if path.is_file():
            return path
    raise FileNotFoundError(f"{package}/msg/{short}.msg not found under {prefixes}")


def installed_definition(msgtype: str) -> tuple[str, str]:
    """(ros2msg definition with dependencies, RIHS01 hash) from the .msg files of the installed
    message packages (ament index), for types no standard typestore knows (a robot's custom
    messages). ('', '') when the package or a nested type is not installed."""
    texts: dict[str, str] = {}
    types: dict = {}

    def visit(name: str) -> None:
        if name in texts:
            return
        package, _kind, short = name.split("/")
        texts[name] = _find_msg_file(package, short).read_text(encoding="utf-8")
        parsed = dict(get_types_from_msg(texts[name], name))
        types.update(parsed)
        for nested in _nested_type_names(parsed[name][1]):
            visit(nested)

    try:
        visit(msgtype)
        store = Typestore()
        store.register(types)
        type_hash = store.hash_rihs01(msgtype)
    except Exception:  # noqa: BLE001 - a missing file or unparsable definition both mean "unknown"
        return "", ""
    separator = "=" * 80
    parts = [texts[msgtype].rstrip("\n") + "\n"]
    for name, text in texts.items():
        if name != msgtype:
            package, _kind, short = name.split("/")
            parts.append(f"{separator}\nMSG: {package}/{short}\n{text.rstrip(chr(10))}\n")
    return "".join(parts), type_hash
