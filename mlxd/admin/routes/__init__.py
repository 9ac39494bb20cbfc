"""The admin API's routes, one module per area."""

from __future__ import annotations

from sanic import Blueprint

from mlxd.admin.routes import config, console, events, live, models, runtime, status


def blueprints() -> list[Blueprint]:
    return [status.bp, config.bp, models.bp, runtime.bp, live.bp, events.bp, console.bp]
