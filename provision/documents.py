"""Documents a user hands us (plan locks, fleet files, base-digest files, image locks, MIG vars):
read, parsed and written so that what the file says is only ever data.

- **Reading** (``read_text``): never through a symbolic link (``O_NOFOLLOW``), only a regular file,
  at most ``max_bytes``, strict UTF-8. Errors name the path and never echo the content (a CI log
  would show a secret file's first line).
- **JSON** (``load_json``): duplicate keys, ``NaN``/``Infinity``, nesting deeper than ``max_depth``
  and documents over ``max_bytes`` are refused. Python's json keeps the last of two equal keys; a
  reviewer reading the file sees the first.
- **YAML** (``load_yaml``): anchors and aliases (the "billion laughs" bomb), duplicate keys,
  non-string keys, nesting deeper than ``max_depth`` and documents over ``max_bytes`` are refused,
  each naming the line. Keys listed in ``versions`` must hold YAML strings: an unquoted ``9.10`` is
  the float 9.1 to YAML, so ``cudnn: 9.10`` would silently plan cuDNN 9.1.
- **Writing** (``write_text``): a temporary file in the target's folder renamed over the target, so
  a symbolic link planted at the output path is replaced, never followed, and a reader never sees
  half a file.
- **Strings** (``refuse_controls``): control characters, the line separators ``str.splitlines()``
  breaks at beyond ``\\n`` and ``\\r``, and the bidirectional overrides that hide text in diff views.

Every refusal is an ``InputError`` (exit 2) with a hint; none is a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from typing import Any

from provision.errors import InputError

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32

# C0 controls (but tab, and newline where a caller allows it), DEL, C1 controls (U+0085 among them),
# the Unicode line and paragraph separators, and the bidirectional embeddings/overrides/isolates.
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_CONTROLS}\n]")
_CONTROL_BUT_NEWLINE = re.compile(f"[{_CONTROLS}]")


def refuse_controls(value: str, what: str, *, newlines: bool = False) -> str:
    """``value`` unless it holds a control character (``newlines``: ``\\n`` allowed, as in a file)."""
    found = (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).search(value)
    if found:
        raise InputError(
            f"{what} holds the control character U+{ord(found.group()):04X} at offset {found.start()}",
            hint="control characters and line separators are refused: they read one way to us and another "
            "to the next tool (or are invisible in a review)",
        )
    return value


def control_character(value: str, *, newlines: bool = False) -> str | None:
    """The first control character in ``value`` as ``U+XXXX``, or None (for callers that report it)."""
    found = (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).search(value)
    return f"U+{ord(found.group()):04X}" if found else None


# -- reading ---------------------------------------------------------------------------------
def read_bytes(path: str | os.PathLike[str], origin: str, *, max_bytes: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, not through a symbolic link, at most ``max_bytes``."""
    p = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        if os.path.islink(p):
            raise InputError(
                f"{origin} {p!r} is a symbolic link", hint="give the file itself: links are not followed"
            ) from None
        raise InputError(
            f"cannot read {origin} {p!r}: {exc.strerror or exc}", hint=f"check the {origin} path"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{origin} {p!r} is not a regular file", hint=f"give {origin} a file")
        if info.st_size > max_bytes:
            raise InputError(
                f"{origin} {p!r} is {info.st_size} bytes, over the {max_bytes} this file may have",
                hint=f"check the {origin} path: this is not a file provision wrote",
            )
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise InputError(f"{origin} {p!r} is over the {max_bytes} bytes this file may have", hint="check the path")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(
            f"cannot read {origin} {p!r}: {exc.strerror or exc}", hint=f"check the {origin} path"
        ) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], origin: str, *, max_bytes: int = MAX_BYTES) -> str:
    """``read_bytes`` decoded as strict UTF-8 (a leading byte-order mark is refused with the rest)."""
    data = read_bytes(path, origin, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{origin} {os.fspath(path)!r} is not UTF-8 text (byte {exc.start})", hint="save it as UTF-8"
        ) from None


# -- JSON ------------------------------------------------------------------------------------
def _unique_pairs(origin: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise InputError(
                    f"{origin} has the key {key[:80]!r} twice in one object",
                    hint="a key may appear once: readers disagree on which of two wins",
                )
            out[key] = value
        return out

    return hook


def _no_constant(origin: str):
    def refuse(name: str) -> Any:
        raise InputError(f"{origin} holds {name}, which is not JSON", hint="numbers must be finite")

    return refuse


def depth(doc: Any) -> int:
    """How deeply lists and mappings nest in ``doc`` (a scalar is 0), without recursion."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _bounded(text: str | bytes, origin: str, max_bytes: int) -> str:
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise InputError(f"{origin} is over the {max_bytes} bytes it may have", hint="check what was given")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{origin} is not UTF-8 text (byte {exc.start})", hint="save it as UTF-8") from None
    elif len(text) > max_bytes:
        raise InputError(f"{origin} is over the {max_bytes} bytes it may have", hint="check what was given")
    return text


def load_json(text: str | bytes, origin: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON document, held to the rules in the module docstring."""
    text = _bounded(text, origin, max_bytes)
    try:
        doc = json.loads(text, object_pairs_hook=_unique_pairs(origin), parse_constant=_no_constant(origin))
    except RecursionError:
        raise InputError(
            f"{origin} nests deeper than {max_depth} levels", hint="this is not a file provision wrote"
        ) from None
    except ValueError as exc:
        raise InputError(f"{origin} is not JSON ({exc})", hint="check the file: it must be one JSON document") from None
    if depth(doc) > max_depth:
        raise InputError(f"{origin} nests deeper than {max_depth} levels", hint="this is not a file provision wrote")
    return doc


# -- YAML ------------------------------------------------------------------------------------
def _strict_loader(origin: str, versions: frozenset[str], max_depth: int):
    import yaml
    from yaml.constructor import SafeConstructor
    from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
    from yaml.nodes import MappingNode, ScalarNode

    str_tag = "tag:yaml.org,2002:str"

    def refuse(mark: Any, what: str, hint: str) -> None:
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(f"{origin}: {line}{what}", hint=hint)

    class Loader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, AliasEvent) or (
                isinstance(event, (ScalarEvent, CollectionStartEvent)) and event.anchor is not None
            ):
                refuse(
                    event.start_mark,
                    "anchors and aliases (&name, *name) are not accepted",
                    "write each value out: aliases can expand a small file into gigabytes",
                )
            self._depth += 1
            if self._depth > max_depth:
                refuse(event.start_mark, f"nests deeper than {max_depth} levels", "flatten the document")
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node, deep=False):
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, value_node in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        refuse(key_node.start_mark, "merge keys (<<) are not accepted", "write each key out")
                    if not isinstance(key_node, ScalarNode) or key_node.tag != str_tag:
                        refuse(
                            key_node.start_mark,
                            f"the key {getattr(key_node, 'value', '?')!r} is not a string",
                            f'quote it: "{getattr(key_node, "value", "")}"',
                        )
                    key = key_node.value
                    if key in seen:
                        refuse(key_node.start_mark, f"the key {key[:80]!r} appears twice", "give each key once")
                    seen.add(key)
                    if (
                        key in versions
                        and isinstance(value_node, ScalarNode)
                        and value_node.tag not in (str_tag, "tag:yaml.org,2002:null")
                    ):
                        refuse(
                            value_node.start_mark,
                            f"{key}: {value_node.value} is read by YAML as a "
                            f"{value_node.tag.rsplit(':', 1)[-1]}, not a version",
                            f'quote it: {key}: "{value_node.value}"',
                        )
            return SafeConstructor.construct_mapping(self, node, deep=deep)

    return Loader


def load_yaml(
    text: str | bytes,
    origin: str,
    *,
    versions: tuple[str, ...] | frozenset[str] = (),
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """One YAML document, held to the rules in the module docstring."""
    import yaml

    text = _bounded(text, origin, max_bytes)
    loader = _strict_loader(origin, frozenset(versions), max_depth)(text)
    try:
        return loader.get_single_data()
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        line = f"line {mark.line + 1}: " if mark is not None else ""
        raise InputError(
            f"{origin}: {line}{exc.problem}", hint="only plain YAML is accepted: no tags but the standard ones"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(
            f"{origin}: {line}not valid YAML: {problem}", hint="check the file's syntax at that line"
        ) from None
    except RecursionError:
        raise InputError(f"{origin} nests deeper than {max_depth} levels", hint="flatten the document") from None
    finally:
        loader.dispose()


# -- writing ---------------------------------------------------------------------------------
def write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` by renaming a finished temporary file over it (OSError on failure).

    A symbolic link at ``path`` is replaced by the file, never followed."""
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(p)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
