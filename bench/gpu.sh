#!/usr/bin/env bash
# mlxd on the GPU machine (NVIDIA H200, mlx's CUDA 13 backend), per ../shared/gpu.md, in three steps:
#
#   bench/gpu.sh prepare   here: wheels for Python 3.12 into bench/.gpu/part1 and part2 (the 90 MB mlx-cuda-13
#                          wheel split in two: one device call carries at most 64 MiB), ignored by git
#   bench/gpu.sh stage1    on the device, call 1 (carry bench/.gpu/part1): keep part 1 while the machine is warm
#   bench/gpu.sh run       on the device, call 2 right after (carry bench/.gpu/part2): join, install, measure
#
# `run` writes $OUT/bench_gpu.json (and the servers' logs): mlxd over HTTP beside raw mlx-lm (stream_generate,
# BatchGenerator) on Qwen3-0.6B shapes in bf16 at 1/8/32/64 streams, with a draft (the self-speculative pair) and
# with a q8_0 KV cache. Put its table in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
GPU=bench/.gpu
MLX=0.32.4
MLX_LM=0.32.2
PY=python3

# What the device image lacks (it has numpy, transformers, tokenizers, jinja2, huggingface-hub,
# prometheus-client and NVIDIA's CUDA 13 libraries): mlxd's other dependencies and the benchmark client's.
EXTRA="pydantic pydantic-core annotated-types typing-inspection typing-extensions pydantic-settings python-dotenv
tomli-w watchfiles anyio idna sniffio sanic sanic-routing httptools uvloop aiofiles websockets multidict
html5tagger tracerite llguidance safetensors httpx httpcore h11 certifi protobuf pyyaml sentencepiece"

case "${1:-}" in
prepare)
    rm -rf "$GPU" && mkdir -p "$GPU/part1" "$GPU/part2" "$GPU/dl"
    exclude=$(git rev-parse --git-path info/exclude)
    grep -qx 'bench/.gpu/' "$exclude" 2>/dev/null || echo 'bench/.gpu/' >> "$exclude"
    pip=".venv/bin/python -m pip"
    plat="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    # shellcheck disable=SC2086
    $pip download --no-deps $plat -d "$GPU/dl" "mlx==$MLX" "mlx-cuda-13==$MLX" "mlx-lm==$MLX_LM" $EXTRA
    $pip wheel --no-deps -w "$GPU/dl" .
    cuda=$(ls "$GPU"/dl/mlx_cuda_13-*.whl)
    split -b 45M "$cuda" "$GPU/part1/cuda.whl.part-"
    mv "$GPU/part1/cuda.whl.part-ab" "$GPU/part2/"
    echo "$(basename "$cuda")" > "$GPU/part2/cuda.name"
    rm "$cuda"
    mv "$GPU"/dl/*.whl "$GPU/part2/"  # the small wheels ride with the second half (each call: tree + 64 MiB)
    du -sh "$GPU/part1" "$GPU/part2"
    ;;
stage1)
    mkdir -p "$GPU/staged" && cp -r "$GPU/part1/." "$GPU/staged/"
    ls "$GPU/staged" | wc -l
    ;;
run)
    test -d "$GPU/staged" || { echo "stage1 did not run on this machine (or it went cold): run it again" >&2; exit 3; }
    cat "$GPU"/staged/cuda.whl.part-aa "$GPU"/part2/cuda.whl.part-ab > "$GPU/staged/$(cat "$GPU/part2/cuda.name")"
    PIP_BREAK_SYSTEM_PACKAGES=1 $PY -m pip install --quiet --no-index --no-deps "$GPU"/staged/*.whl "$GPU"/part2/*.whl
    nv=$($PY -c "import nvidia; print(list(nvidia.__path__)[0])")
    LD_LIBRARY_PATH="$(ls -d "$nv"/*/lib | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    $PY -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device())"
    out="${OUT:-/tmp/mlxd-gpu}"
    $PY -m bench.bench_gpu "$out" --preset qwen3-0.6b --dtype bfloat16 --streams 1,8,32,64 --tokens 128 --prompt 128 \
        --passthrough 28
    rm -rf "$out/models"  # the synthetic checkpoints are not worth carrying back
    ;;
*)
    echo "usage: bench/gpu.sh prepare | stage1 | run" >&2
    exit 2
    ;;
esac
