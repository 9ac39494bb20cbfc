"""Why mlxd refuses or ignores an option, and what kind of difference each reason is (the compat manifest's state).

Keyed by option name or by a ``why=`` key of the option table (:mod:`mlxd.config.facts`).
"""

from __future__ import annotations

# Why an option is refused, and what to use instead. Keyed by option name or by a ``why=`` key.
REASONS: dict[str, tuple[str, str]] = {
    "affinity": ("CPU affinity and thread priority belong to ggml's thread pool; MLX schedules its own threads",
                 "leave it unset; pin the whole process with taskset or systemd CPUAffinity="),
    "spec-type": ("only draft-simple (a draft model, -md) and the n-gram types (ngram-simple, ngram-map-k, "
                  "ngram-map-k4v, ngram-mod, ngram-cache) are implemented by mlxd; the eagle3, mtp, dflash and dspark "
                  "drafts are not yet",
                  "use one of the n-gram types, or draft-simple with -md or --spec-draft-hf, or leave it unset"),
    "spec": ("this part of speculative decoding is not yet implemented by mlxd (mlx-lm can draft and verify)",
             "leave it unset"),
    "multimodal": ("an MLX multimodal checkpoint holds its own vision and audio towers and projector, which mlxd "
                   "loads from the model directory; a separate GGUF projector file cannot be loaded",
                   "pass the multimodal MLX checkpoint with -m (or --hf-repo); --no-mmproj serves it as text only"),
    "cache-reuse": ("KV-shift chunk reuse is not yet implemented by mlxd; the prompt cache reuses the longest "
                    "common prefix", "leave it at 0; prompt caching stays on"),
    "kv-type": ("iq4_nl is a non-linear 4-bit codebook and MLX's quantization is affine, so it has no MLX "
                "equivalent", "use q4_0 or q4_1 (MLX's 4-bit affine quantization in blocks of 32), or q8_0"),
    "placement": ("tensor placement between CPU and GPU is a ggml feature; MLX keeps every tensor in unified memory",
                  "leave it unset"),
    "multi-gpu": ("MLX runs a model on one device", "leave it unset"),
    "control-vector": ("control vectors (a per-layer vector added to the hidden state, which MLX could apply) are "
                       "not yet implemented by mlxd",
                       "leave it unset; use a LoRA adapter (--lora) instead"),
    "builtin-preset": ("built-in presets download GGUF models",
                       "pass an MLX checkpoint with -m DIR or --hf-repo ORG/NAME and the sampling options you need"),
    "rpc": ("each --rpc entry is HOST:PORT of an `mlxd rpc-server` (b10621's rpc-server speaks ggml's protocol, which "
            "mlxd does not)", "give HOST:PORT,HOST:PORT of machines running `mlxd rpc-server -H HOST -p PORT`"),
    "split-mode": ("--split-mode tensor is not yet implemented by mlxd across machines",
                   "use --split-mode row (tensor parallelism, mlx-lm's shard) or layer (pipeline parallelism)"),
    "tensor-split": ("--tensor-split takes one non-negative share per machine, front end first, e.g. 3,1",
                     "give comma-separated numbers, one per machine (the front end and each --rpc peer)"),
    "mlock": ("MLX does not lock model memory", "leave it unset"),
    "numa": ("NUMA placement is a ggml feature", "leave it unset; use numactl on the whole process"),
    "device": ("devices are ggml backend names; MLX uses its default device",
               "leave it unset, or give none (CPU-only) where MLX runs on the CPU"),
    "override-kv": ("GGUF metadata overrides do not apply to MLX checkpoints",
                    "edit the checkpoint's config.json instead"),
    "model-url": ("it downloads a GGUF file", "download an MLX checkpoint and pass its directory with -m"),
    "docker-repo": ("it pulls a GGUF model from Docker Hub", "pass an MLX checkpoint with -m DIR or --hf-repo"),
    "hf-file": ("it selects a GGUF file inside a repository", "pass an MLX repository with --hf-repo ORG/NAME"),
    "removed": ("b10621 itself rejects it as removed", "use --spec-draft-n-max / --spec-draft-n-min or drop it"),
    "model": ("GGUF files cannot be loaded by MLX", "pass the directory of an MLX checkpoint (config.json and "
              "*.safetensors), or convert with `mlx_lm.convert`"),
    "hf-repo": ("a ':QUANT' tag selects a GGUF file", "pass an MLX repository without a tag, e.g. mlx-community/NAME"),
    "ngl": ("partial GPU offload is a ggml feature; MLX keeps the whole model on one device",
            "use -ngl all, auto, or any count at or above the model's layer count, which is what mlxd does; -ngl 0 "
            "(CPU-only) where MLX runs on the CPU"),
    "rope": ("--rope-scale N means --rope-freq-scale 1/N, and the two values given disagree",
             "give only one of them"),
    "flash-attn": ("MLX always uses its fused attention kernel", "use -fa on or -fa auto"),
    "path": ("--path must name a directory that exists", "give the directory of the static files to serve"),
    "webui-config": ("--webui-config must be a JSON object", "give the page's settings as a JSON object"),
    "webui-config-file": ("--webui-config-file must be a readable file holding a JSON object",
                          "give the path of a JSON file holding the page's settings"),
    "reasoning-preserve": ("earlier assistant turns' reasoning is rendered as the chat template does by default; "
                           "forcing it on or off is not yet implemented by mlxd",
                           "leave it unset; pass the template's own switch in --chat-template-kwargs"),
    "log-prompts-dir": ("writing prompts to files is not yet implemented by mlxd",
                        "leave it unset; POST /apply-template renders a chat prompt, and each completion's `prompt` "
                        "echoes the text it ran"),
    "threads-batch": ("mlxd sets one OpenBLAS thread count for the whole process (--threads); a separate count for "
                      "prompt processing is not yet implemented by mlxd", "leave it unset; --threads sets both"),
    "threads-draft": ("mlxd sets one OpenBLAS thread count for the whole process (--threads), the draft model's "
                      "products included; a separate count for the draft is not yet implemented by mlxd",
                      "leave it unset; --threads sets it for both models"),
    "swa-full": ("mlx-lm sizes a sliding-window layer's cache to its window, as b10621 does by default; a full-size "
                 "SWA cache is not yet implemented by mlxd", "leave it unset"),
    "checkpoints": ("context checkpoints are not yet implemented by mlxd: a sliding-window or recurrent cache is "
                    "reused only while it can be trimmed to the shared prefix", "leave it unset or 0"),
    "perf": ("libllama's internal performance counters do not exist under MLX",
             "read each response's `timings` object, or GET /metrics with --metrics"),
    "tools": ("built-in agent tools belong to llama-server's own web UI; mlxd's chat page has none (/tools "
              "answers 403 as b10621 does when no tools are enabled)", "leave it unset; give tools to a chat request's `tools`"),
    "mcp": ("the MCP proxy and MCP servers belong to llama-server's own web UI; mlxd's chat page has neither",
            "leave it unset; connect MCP servers in the client"),
    "agent": ("the agent mode (CORS proxy and built-in tools) belongs to llama-server's own web UI; mlxd's chat "
              "page has none", "leave it disabled; give tools to a chat request's `tools`"),
    "escape": ("escape processing of --dry-sequence-breaker values is not yet implemented by mlxd; they are taken "
               "as given", "give the characters themselves"),
    "yarn-ext-factor": ("mlx-lm's YaRN always mixes with extrapolation factor 1.0",
                        "leave it unset (-1) or give 1.0"),
    "yarn-attn-factor": ("mlx-lm's YaRN derives its attention scale from the scaling factor alone",
                         "leave it unset (-1) or give 1.0"),
}

# The reasons that are mlxd's own gaps: MLX (or mlx-lm, mlx-vlm) could do it and mlxd does not yet. An option
# refused or inert for one of these is `deferred` in the compat manifest, never `not_applicable`.
GAPS = frozenset({
    "spec", "cache-reuse", "control-vector", "reasoning-preserve", "log-prompts-dir",
    "swa-full", "checkpoints", "escape", "threads-batch", "threads-draft",
})

# Why the other refused or inert options have no MLX equivalent, by reason key: the `basis` of their
# `not_applicable` manifest entry (one of mlxd.compat.manifest.BASES). Rows without a key tune ggml.
BASIS: dict[str, str] = {
    "affinity": "ggml", "placement": "ggml", "multi-gpu": "ggml", "mlock": "ggml", "numa": "ggml",
    "device": "ggml", "ngl": "ggml", "perf": "ggml", "builtin-preset": "gguf", "override-kv": "gguf",
    "model-url": "gguf", "docker-repo": "gguf", "multimodal": "gguf", "hf-file": "gguf", "removed": "upstream-removed",
    "flash-attn": "mlx-kernel",
}

# The reasons that are mlxd's own permanent choice: the agent tools and MCP proxy of llama-server's bundled web UI,
# which an MLX daemon could serve but mlxd's own chat page (mlxd.web) does not. Their options are refused, and
# their manifest entries are `by_design` (a recorded, tested, permanent difference), neither a gap nor "no MLX
# equivalent".
POLICIES = frozenset({"tools", "mcp", "agent"})

# Category-level fallback reasons for ``refuse`` and ``inert=`` rows without a ``why=``.
CATEGORY_REASONS: dict[str, tuple[str, str]] = {
    "common": ("it configures a ggml backend feature that MLX does not have", "leave it unset"),
    "speculative": REASONS["spec"],
}
