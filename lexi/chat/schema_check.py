"""A client's JSON Schema checked and applied: tool and response-format checks, call and answer verification.

Validators are built for the draft the schema names in `$schema`; for one that names none, 2020-12,
unless it writes `items` as an array (tuple validation, with `additionalItems`): that form exists only in
the drafts before 2020-12, and clients still send it, so such a schema is read as draft 7. `$ref`s are
followed as constraint translation follows them (lexi/structured/schema_refs.py: local ones only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError

from lexi.structured.schema_refs import SchemaRefError, local_refs, resolve_ref


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


def validation_error(validator: jsonschema.protocols.Validator, value: Any) -> str | None:
    """A one-line reason `value` does not validate (the most relevant error), or None when it does."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where.lstrip('.') or 'the value'}: {error.message}"
