"""A small JSON-Schema subset: one definition validates requests and documents them.

Request bodies are declared once as JSON Schema; the same dict goes into the OpenAPI document
and through `validate`, so the documentation cannot drift from what the server accepts.
Only the keywords XCE uses are supported; an error names the field path that is wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any

from xce.core.errors import InvalidRequest

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[kind])


def validate(value: Any, schema: dict[str, Any], path: str = "body") -> None:
    """Raise `InvalidRequest` naming the first field of `value` that `schema` rejects."""
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(value, k) for k in kinds):
            shown = type(value).__name__ if value is not None else "null"
            raise InvalidRequest(f"{path} must be {' or '.join(kinds)}, got {shown}")
    if value is None:
        return
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidRequest(f"{path} must be one of {', '.join(map(str, schema['enum']))}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise InvalidRequest(f"{path} is longer than {schema['maxLength']} characters")
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise InvalidRequest(f"{path} is shorter than {schema['minLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise InvalidRequest(f"{path} {value!r} does not match {schema['pattern']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidRequest(f"{path} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidRequest(f"{path} must be at most {schema['maximum']}, got {value}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise InvalidRequest(
                f"{path} must be more than {schema['exclusiveMinimum']}, got {value}"
            )
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            raise InvalidRequest(
                f"{path} must be less than {schema['exclusiveMaximum']}, got {value}"
            )
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise InvalidRequest(f"{path} has more than {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise InvalidRequest(
                f"{path} needs at least {schema['minItems']} "
                f"item{'' if schema['minItems'] == 1 else 's'}"
            )
        if schema.get("uniqueItems"):
            seen: set[str] = set()
            for i, item in enumerate(value):
                # items may be objects (unhashable): compare their canonical JSON
                key = json.dumps(item, sort_keys=True)
                if key in seen:
                    raise InvalidRequest(f"{path}[{i}] repeats an earlier item")
                seen.add(key)
        for i, item in enumerate(value):
            validate(item, schema.get("items", {}), f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                raise InvalidRequest(f"{path}.{key} is required")
        extra = schema.get("additionalProperties", True)
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            raise InvalidRequest(f"{path} has more than {schema['maxProperties']} entries")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            raise InvalidRequest(
                f"{path} needs at least {schema['minProperties']} "
                f"{'entry' if schema['minProperties'] == 1 else 'entries'}"
            )
        for key, item in value.items():
            if "propertyNames" in schema:
                validate(key, schema["propertyNames"], f"{path} key {key[:64]!r}")
            if key in props:
                validate(item, props[key], f"{path}.{key}")
            elif extra is False:
                raise InvalidRequest(f"{path}.{key} is not a known field")
            elif isinstance(extra, dict):
                validate(item, extra, f"{path}.{key}")
