"""The chat page at ``/`` on the public listener (b10621's contract: ``--no-webui``, ``--path``, ``--webui-config``)
and its conversation store (SQLite under ``--state-dir``, scoped per API key).

The page's static files only talk to the public API and to the store's routes; nothing here changes serving state.
The daemon calls :func:`install` on the public app once, after ``mlxd.api.app.create_app``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sanic import Sanic

from mlxd.api import ServingState
from mlxd.web.paths import STORE_PREFIX, store_path
from mlxd.web.routes import install_store
from mlxd.web.static import install_static
from mlxd.web.store import ConversationStore

__all__ = ["STORE_PREFIX", "ConversationStore", "install", "store_path"]


def install(app: Sanic, state: ServingState, prefix: str, env: Mapping[str, str]) -> ConversationStore | None:
    """Serve the page and, unless ``--no-webui-store``, the conversation store on ``app``; the store, if opened."""
    install_static(app, state, prefix)
    store = None
    if state.config.webui_store:  # read at startup: the store's option is a restart (facts.py)
        store = ConversationStore(store_path(state.config.state_dir, env))
        store.open()
    install_store(app, state, prefix, store)
    return store
