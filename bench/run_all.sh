#!/usr/bin/env bash
# Every benchmark on the synthetic checkpoints, one after the other (never two at once: they share the cores).
# Results land in .cache/bench-results/ (JSON and markdown); docs/benchmarks.md quotes them.
#   bench/run_all.sh            tiny and small
#   BENCH_PRESETS="tiny small qwen3-0.6b" bench/run_all.sh   adds the long run
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
MODELS=.cache/bench-models
OUT=.cache/bench-results
mkdir -p "$MODELS" "$OUT"

for preset in ${BENCH_PRESETS:-tiny small}; do
    [ -f "$MODELS/$preset/config.json" ] || .venv/bin/mlxd dev synth-model "$MODELS/$preset" --preset "$preset"
done

for preset in ${BENCH_PRESETS:-tiny small}; do
    m="$MODELS/$preset"
    echo "== $preset: engine (in-process)" >&2
    $PY bench/bench_engine.py "$m" --tokens 128 --repeat 3 | tee "$OUT/engine-$preset.json"
    echo "== $preset: HTTP, mlxd-server against mlx_lm.server" >&2
    servers=mlxd,mlx_lm,mlx_lm+openblas
    # With mlx's bundled BLAS, mlx_lm.server is 3 to 10 times slower on small: fully measured on tiny only,
    # and on small by the short probe below.
    [ "$preset" = tiny ] || servers=mlxd,mlx_lm+openblas
    $PY bench/bench_http.py "$m" --tokens 128 --repeat 5 --servers "$servers" \
        --out "$OUT/http-$preset.json" | tee "$OUT/http-$preset.md"
done

echo "== small: mlx_lm.server with mlx's bundled BLAS, a short probe" >&2
$PY bench/bench_http.py "$MODELS/small" --streams 1,8 --tokens 32 --repeat 3 --prefix 256 \
    --out "$OUT/http-small-bundled.json" | tee "$OUT/http-small-bundled.md"

echo "== small: constrained decode" >&2
for constraint in json gbnf; do
    $PY bench/bench_constrained.py "$MODELS/small" --tokens 128 --streams 1,8 --constraint "$constraint" \
        | tee "$OUT/constrained-small-$constraint.json"
done

for preset in tiny small; do
    echo "== $preset: change latency under 8 streams" >&2
    $PY bench/bench_reload.py "$MODELS/$preset" --out "$OUT/reload-$preset.json" | tee "$OUT/reload-$preset.md"
done
