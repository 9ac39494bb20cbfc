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
    case "$preset" in
        tiny) args=(--tokens 128 --repeat 5 --servers mlxd,mlx_lm,mlx_lm+openblas) ;;
        # The long run: 3 GB of float32 weights decode at about 9 tok/s here.
        qwen3-0.6b) args=(--streams 1,8 --tokens 32 --repeat 3 --prefix 256 --servers mlxd,mlx_lm+openblas) ;;
        # With mlx's bundled BLAS, mlx_lm.server is 3 to 30 times slower on small: measured apart, below.
        *) args=(--tokens 128 --repeat 5 --servers mlxd,mlx_lm+openblas) ;;
    esac
    $PY bench/bench_http.py "$m" "${args[@]}" --out "$OUT/http-$preset.json" | tee "$OUT/http-$preset.md"
done

for preset in tiny small; do
    echo "== $preset: thread placement, on mlx-lm's own loop" >&2
    $PY bench/bench_placement.py "$MODELS/$preset" --tokens 128 --repeat 7 --out "$OUT/placement-$preset.json" \
        | tee "$OUT/placement-$preset.md"
    echo "== $preset: --worker-affinity auto against off" >&2
    $PY bench/bench_http.py "$MODELS/$preset" --streams 1,8 --tokens 128 --repeat 5 --prefix 128 \
        --servers mlxd,mlxd+affinity-off,mlx_lm+openblas --out "$OUT/http-$preset-affinity.json" \
        | tee "$OUT/http-$preset-affinity.md"
done

echo "== tiny: one stream, 9 turns (the reference changes placement from run to run)" >&2
$PY bench/bench_http.py "$MODELS/tiny" --streams 1 --tokens 128 --repeat 9 --prefix 64 \
    --servers mlxd,mlx_lm+openblas --out "$OUT/http-tiny-one.json" | tee "$OUT/http-tiny-one.md"

echo "== tiny, small: OpenBLAS's idle-thread timeout, mlxd's (2^20 cycles) against OpenBLAS's own (2^28)" >&2
$PY bench/bench_http.py "$MODELS/tiny" --streams 1,8,16 --tokens 128 --repeat 5 --prefix 64 \
    --servers mlxd,mlxd+env:OPENBLAS_THREAD_TIMEOUT=28,mlx_lm+openblas --out "$OUT/http-tiny-blas-timeout.json" \
    | tee "$OUT/http-tiny-blas-timeout.md"
$PY bench/bench_http.py "$MODELS/small" --streams 1,8 --tokens 128 --repeat 5 --prefix 128 \
    --servers mlxd,mlxd+env:OPENBLAS_THREAD_TIMEOUT=28,mlx_lm+openblas --out "$OUT/http-small-blas-timeout.json" \
    | tee "$OUT/http-small-blas-timeout.md"

echo "== small: mlx_lm.server with mlx's bundled BLAS, 8 streams" >&2
$PY bench/bench_http.py "$MODELS/small" --streams 8 --tokens 128 --repeat 3 --prefix 256 \
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
