"""``/embedding(s)``, ``/v1/embeddings`` and ``/rerank`` with its aliases.

b10621 serves these only in its embedding (``--embeddings``) or reranking (``--reranking``) mode and refuses them
otherwise with a 501. mlxd serves generative MLX checkpoints: with the mode off it refuses exactly as upstream;
with it on it refuses too, naming what is missing, because pooled embeddings and rerank scores are not computed yet.
"""

from __future__ import annotations

from sanic import Blueprint, Request

from mlxd.api.context import serving
from mlxd.errors import NotSupported

bp = Blueprint("embeddings")

EMBEDDINGS_OFF = "This server does not support embeddings. Start it with `--embeddings`"
RERANKING_OFF = "This server does not support reranking. Start it with `--reranking`"
NOT_YET = (
    "{what} are not available in mlxd yet: the server would have to pool a model's hidden states "
    "(--pooling), which is not implemented; serve them with another server"
)


def refuse_embeddings(request: Request) -> None:
    if not getattr(serving(request).config, "embeddings", False):
        raise NotSupported(EMBEDDINGS_OFF)
    raise NotSupported(NOT_YET.format(what="embeddings"))


def refuse_rerank(request: Request) -> None:
    if not getattr(serving(request).config, "reranking", False):
        raise NotSupported(RERANKING_OFF)
    raise NotSupported(NOT_YET.format(what="rerank scores"))


@bp.post("/embedding")
@bp.post("/embeddings", name="embeddings_alias")
async def embedding(request: Request):
    refuse_embeddings(request)


@bp.post("/v1/embeddings")
async def embeddings_oai(request: Request):
    refuse_embeddings(request)


@bp.post("/rerank")
@bp.post("/reranking", name="reranking")
@bp.post("/v1/rerank", name="v1_rerank")
@bp.post("/v1/reranking", name="v1_reranking")
async def rerank(request: Request):
    refuse_rerank(request)
