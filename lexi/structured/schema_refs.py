"""A schema's `$ref`s, as translation and lexi/chat's checks follow them, and what a schema says of a property.

Only local references (`#`, `#/$defs/name`, any JSON pointer into the same schema) are followed: a
schema is the client's data, and resolving a remote `$ref` would make the server fetch URLs on its
behalf.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote


class SchemaRefError(ValueError):
    """The schema is not valid JSON Schema, or one of its references cannot be followed."""


def local_refs(node: Any) -> Iterator[str]:
    """Every `$ref` value anywhere in the schema."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for key, value in node.items():
            if key not in ("const", "enum", "default", "examples"):
                yield from local_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from local_refs(value)


def resolve_ref(root: Mapping[str, Any], ref: str) -> Any:
    """The subschema a local reference points at; SchemaRefError for remote or dangling ones."""
    if not ref.startswith("#"):
        raise SchemaRefError(f"$ref {ref!r} is not local: only references into the same schema (#/...) are followed")
    pointer = unquote(ref[1:])
    if pointer and not pointer.startswith("/"):
        raise SchemaRefError(f"$ref {ref!r} names an anchor: only JSON pointers (#/...) are followed")
    node: Any = root
    for raw in pointer.split("/")[1:] if pointer else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaRefError(f"$ref {ref!r} points at nothing in the schema")
    if not isinstance(node, dict | bool):
        raise SchemaRefError(f"$ref {ref!r} points at something that is not a schema")
    return node


def says_string(parameters: Any, key: str) -> bool:
    """Whether the schema of property `key` says it is a string (following one local $ref)."""
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    schema = properties.get(key) if isinstance(properties, dict) else None
    if isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        try:
            schema = resolve_ref(parameters, schema["$ref"])
        except ValueError:
            return False
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "string":
        return True
    choices = schema.get("enum", [schema["const"]] if "const" in schema else None)
    return "type" not in schema and bool(choices) and all(isinstance(c, str) for c in choices)
