#!/usr/bin/env bash
# The 180M-parameter pair beside the tiny fixture (issue 30), in one run: mlxd-server against llama-server and
# mlx_lm.server (with the OpenBLAS mlxd's --cpu-blas auto loads), same client, 1, 4 and 8 streams on a random-weight
# float32 llama whose matrix products, not per-token host cost, dominate; then the tiny oracle fixture at 1, 8 and
# 32 streams, where host cost does.
#   bench/mid_pair.sh [EXTRA bench_http ARGS]
# Needs llama-server, built by ../shared/tools/llama-ref.sh (whose sources also carry gguf-py, which writes the GGUF
# twin). The pair is made once by ../shared/tools/make_mid_llama.py (hidden 1024, 16 layers: 180M parameters) into
# .cache/bench-models/mid-llama and mid-llama.gguf; results land in .cache/bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
SHARED=${MLXD_SHARED:-../shared}
[ -d "$SHARED/tools" ] || SHARED=/work/shared
REF=${LLAMA_REF_DIR:-$HOME/.cache/llama-ref}
MODELS=.cache/bench-models
OUT=.cache/bench-results
MID=$MODELS/mid-llama
mkdir -p "$MODELS" "$OUT"

[ -x "$REF/build/bin/llama-server" ] || { echo "mid_pair: no llama-server; run $SHARED/tools/llama-ref.sh" >&2; exit 1; }
if [ ! -f "$MID.gguf" ]; then
    PYTHONPATH="$REF/src/gguf-py" $PY "$SHARED/tools/make_mid_llama.py" "$MID"
fi

echo "== mid-llama (180M, float32): 1, 4, 8 streams" >&2
$PY bench/bench_http.py "$MID" --streams 1,4,8 --tokens 32 --prefix 443 --repeat 3 --client raw \
    --servers mlxd,mlx_lm+openblas,llama-server --out "$OUT/http-mid-llama.json" "$@" | tee "$OUT/http-mid-llama.md"

echo "== tiny-llama fixture: 1, 8, 32 streams" >&2
$PY bench/bench_http.py "$SHARED/fixtures/tiny-llama" --streams 1,8,32 --tokens 128 --repeat 5 --client raw \
    --servers mlxd,mlx_lm+openblas,llama-server --out "$OUT/http-tiny-llama-pair.json" "$@" \
    | tee "$OUT/http-tiny-llama-pair.md"
