"""JSON Schema plumbing shared by tool checks, call verification and constraint translation.

Only local references (`#`, `#/$defs/name`, any JSON pointer into the same schema) are followed: a
schema is the client's data, and resolving a remote `$ref` would make the server fetch URLs on its
behalf. Validators are built for the draft the schema names in `$schema`; for one that names none, 2020-12,
unless it writes `items` as an array (tuple validation, with `additionalItems`): that form exists only in
the drafts before 2020-12, and clients still send it, so such a schema is read as draft 7.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote

import jsonschema
from jsonschema.exceptions import SchemaError


class SchemaRefError(ValueError):
    """The schema is not valid JSON Schema, or one of its references cannot be followed."""


def schema_validator(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    """A validator for `schema`, after checking the schema against its draft's metaschema."""
    default = jsonschema.Draft7Validator if _tuple_items(schema) else jsonschema.Draft202012Validator
    cls = jsonschema.validators.validator_for(schema, default=default)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
        raise SchemaRefError(f"{exc.message}" + (f" (at {where.lstrip('.')})" if where else "")) from None
    return cls(schema)


def _tuple_items(node: Any) -> bool:
    """Some subschema writes `items` as an array (iterative; values under const/enum/default/examples are data)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("items"), list):
                return True
            stack.extend(v for k, v in node.items() if k not in ("const", "enum", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return False


def check_schema(schema: Mapping[str, Any]) -> None:
    """Valid against its metaschema, and every $ref resolves locally; SchemaRefError says what is wrong."""
    schema_validator(schema)
    for ref in local_refs(schema):
        resolve_ref(schema, ref)


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


def validation_error(validator: jsonschema.protocols.Validator, value: Any) -> str | None:
    """A one-line reason `value` does not validate (the most relevant error), or None when it does."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where.lstrip('.') or 'the value'}: {error.message}"
