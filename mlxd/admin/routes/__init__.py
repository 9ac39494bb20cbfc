"""The admin API's routes, one module per area."""

from __future__ import annotations

from sanic import Blueprint


def blueprints() -> list[Blueprint]:
    from mlxd.admin import console
    from mlxd.admin.routes import config, events, models, runtime, status

    return [status.bp, config.bp, models.bp, runtime.bp, events.bp, console.bp]
