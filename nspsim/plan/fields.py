"""Exact-type readers of a plan file's JSON values.

Every value must have its JSON type exactly: an integer field takes an integer (not ``223.7`` nor
``"223"``; a bool is not an integer), marks take ``true``/``false`` (or 0/1), node names are canonical
(``sp8#3``). Coercion would let an edited file keep its content hash while meaning something else.
Each reader raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from typing import Any

from nspsim.sp_tree import Node


def int_field(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return value


def str_field(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {value!r}")
    return value


def dict_field(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, got {type(value).__name__}")
    return value


def list_field(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    return value


def ints(values: Any, what: str) -> tuple[int, ...]:
    items = list_field(values, what)
    for j, value in enumerate(items):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what}[{j}] must be an integer, got {value!r}")
    return tuple(items)


def marks(values: Any) -> tuple[bool, ...] | None:
    """Recompute marks: ``null`` (unmarked) or a list of ``true``/``false`` or ``0``/``1`` (as written)."""
    if values is None:
        return None
    items = list_field(values, "samples.recompute")
    for j, value in enumerate(items):
        if not isinstance(value, int) or value not in (0, 1):  # bools are ints: True == 1
            raise ValueError(f"samples.recompute[{j}] must be 0, 1, true or false, got {value!r}")
    return tuple(bool(v) for v in items)


def nodes(values: Any, what: str) -> tuple[Node, ...]:
    nodes = []
    for j, text in enumerate(list_field(values, what)):
        node = Node.parse(str_field(text, f"{what}[{j}]"))
        if node.to_str() != text:
            raise ValueError(f"{what}[{j}]: node name {text!r} is not canonical (write {node.to_str()!r})")
        nodes.append(node)
    return tuple(nodes)


def metadata(value: Any) -> dict[str, float | int | str]:
    meta = dict_field(value, "metadata")
    for key, item in meta.items():
        if not isinstance(item, (int, float, str)):
            raise ValueError(f"metadata {key!r} must be a number or a string, got {type(item).__name__}")
    return meta
