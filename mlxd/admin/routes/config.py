"""``/v1/config`` (read, replace, patch, validate), ``/v1/reload`` and ``/v1/persist``: every write goes through
the controller, so it is validated, diffed and applied (or refused) like a file edit."""

from __future__ import annotations

from typing import Any

from sanic import Blueprint, HTTPResponse, Request

from mlxd.admin.responses import json_response
from mlxd.admin.host import AdminController
from mlxd.admin.body import change_response, document_off_loop, if_match, json_object
from mlxd.admin.persist import persist_overrides
from mlxd.config import UNSET, table
from mlxd.config.render import explain_data, shown
from mlxd.errors import AdminError
from mlxd.schemas.admin import ConfigResponse

bp = Blueprint("admin_config")


def _controller(request: Request) -> AdminController:
    controller: AdminController | None = request.app.ctx.host.controller
    if controller is None:  # the gate answers 503 before this while the daemon starts
        raise AdminError("unavailable", "the daemon is starting; retry when it is serving", 503)
    return controller


def redacted_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """The admin layer as it may be shown: secret options redacted."""
    specs = table().by_key
    return {key: shown(specs[key], value) if key in specs and value is not None else value
            for key, value in overrides.items()}


def patch_values(body: dict[str, Any]) -> dict[str, Any]:
    """A PATCH body as overrides: ``null`` removes the option's override, so it falls back to the files (setting an
    option to nothing is what the files, or a PUT of the whole layer, say)."""
    return {key: UNSET if value is None else value for key, value in body.items()}


@bp.get("/v1/config", ctx_kind="read")
async def get_config(request: Request) -> HTTPResponse:
    controller = _controller(request)
    data = explain_data(controller.resolved)
    body = ConfigResponse(generation=controller.generation, config_hash=controller.resolved.config_hash,
                          etag=controller.etag, overrides=redacted_overrides(controller.overrides), **data)
    payload = body.model_dump()
    if payload["models"] is None:
        del payload["models"]
    return json_response(payload, headers={"ETag": f'"{controller.etag}"'})


@bp.get("/v1/config/effects", ctx_kind="read")
async def get_effects(request: Request) -> HTTPResponse:
    """What a change of each option does to the running daemon (live, reload, restart...), from the option table:
    the operator console shows it beside each value and its source."""
    return json_response({"effects": {spec.name: list(spec.effects) for spec in table()}})


@bp.put("/v1/config", ctx_kind="write")
async def put_config(request: Request) -> HTTPResponse:
    """Replace the whole admin layer with a TOML or JSON document (options not named fall back to the files)."""
    controller = _controller(request)
    result = await controller.replace_overrides(await document_off_loop(request), if_match=if_match(request))
    return change_response(result, controller)


@bp.patch("/v1/config", ctx_kind="write")
async def patch_config(request: Request) -> HTTPResponse:
    """Lay ``{option: value}`` over the running configuration."""
    controller = _controller(request)
    result = await controller.patch(patch_values(json_object(request)), if_match=if_match(request))
    return change_response(result, controller)


@bp.post("/v1/config/validate", ctx_kind="read")
async def validate_config(request: Request) -> HTTPResponse:
    """A dry run: ``?mode=replace`` checks a whole admin layer, otherwise a patch; nothing is applied."""
    controller = _controller(request)
    values = await document_off_loop(request)
    if request.args.get("mode", "patch") == "replace":
        result = await controller.replace_overrides(values, dry_run=True)
    else:
        result = await controller.patch(patch_values(values), dry_run=True)
    return change_response(result, controller)


@bp.post("/v1/reload", ctx_kind="write")
async def reload(request: Request) -> HTTPResponse:
    """Re-read the configuration files (the admin layer stays on top)."""
    controller = _controller(request)
    return change_response(await controller.reload("admin:reload"), controller)


@bp.post("/v1/persist", ctx_kind="write")
async def persist(request: Request) -> HTTPResponse:
    """Write the admin overrides into the --config TOML file, atomically and with its permissions."""
    controller = _controller(request)
    path = controller.resolved.config.config
    if not path:
        raise AdminError("no_config_file", "the daemon was started without --config; there is no file to write",
                         409)
    return json_response(await persist_overrides(controller, path))
