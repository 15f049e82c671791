"""The API's OpenAPI document, served at /openapi.json as vLLM's and FastAPI's servers serve
theirs: each route with its methods and what it does (its handler's docstring), and the
request body of each that takes one, as its declared model's JSON schema (`bodies.py`, and
each API family's own). A family's models are named with the family's name before theirs
(`anthropic_ToolDefinition`): two families may each declare a model of the same name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import (
    CoreModeRef,
    CoreRef,
    DefsRef,
    GenerateJsonSchema,
    models_json_schema,
)
from starlette.routing import BaseRoute, Route

SCHEMAS = "#/components/schemas/{model}"
ERROR = 'an error in OpenAI\'s shape: {"error": {"message", "type", "param", "code"}}'


def document(
    routes: Iterable[BaseRoute],
    bodies: Mapping[str, type[BaseModel]],
    version: str,
    namespaces: Mapping[str, str],
) -> dict[str, Any]:
    """OpenAPI 3.1 (whose schemas are JSON Schema's, as pydantic writes them) for `routes`;
    `bodies`: the path of each route that takes a JSON body, to the body's model;
    `namespaces`: the name that prefixes the names of the models each module declares."""

    class Named(GenerateJsonSchema):
        def get_defs_ref(self, core_mode_ref: CoreModeRef) -> DefsRef:
            # A model's core ref is `module.Name:id`: its name is what follows the last dot.
            core_ref, mode = core_mode_ref
            module, _, name = core_ref.rpartition(".")
            if module in namespaces:
                core_ref = CoreRef(f"{module}.{namespaces[module]}_{name}")
            return super().get_defs_ref((core_ref, mode))

    refs, schemas = models_json_schema(
        [(model, "validation") for model in bodies.values()],
        ref_template=SCHEMAS,
        schema_generator=Named,
    )
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        operation: dict[str, Any] = {
            "description": " ".join((route.endpoint.__doc__ or "").split()),
            "responses": {"200": {"description": "the answer"}, "default": {"description": ERROR}},
        }
        if route.path in bodies:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": refs[bodies[route.path], "validation"]}},
            }
        for method in sorted((route.methods or set()) - {"HEAD"}):
            paths.setdefault(route.path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "specrun", "version": version},
        "paths": paths,
        "components": {"schemas": schemas.get("$defs", {})},
    }
