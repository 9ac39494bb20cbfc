"""The typed configuration, one attribute per option. Generated: ``python -m mlxd.config.codegen``."""

# fmt: off
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Config(BaseModel):
    """Every option's resolved value, named by its field (``ctx-size`` -> ``ctx_size``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())

    def value(self, field: str) -> object:
        """One option's value by its field name: for what walks the option table (diff, render, explain), where
        code that reads one option names its attribute."""
        return getattr(self, field)

    usage: bool = False
    version: bool = False
    cache_list: bool = False
    completion_bash: bool = False
    threads: int = -1
    threads_batch: int = -1
    cpu_mask: str = ''
    cpu_range: str | None = None
    cpu_strict: str = '0'
    prio: int = 0
    poll: str = '50'
    cpu_mask_batch: str = ''
    cpu_range_batch: str | None = None
    cpu_strict_batch: int = 0
    prio_batch: int = 0
    poll_batch: int | None = None
    lookup_cache_static: str | None = None
    lookup_cache_dynamic: str | None = None
    ctx_size: int = 0
    n_predict: int = -1
    batch_size: int = 2048
    ubatch_size: int = 512
    keep: int = 0
    swa_full: bool = False
    swa_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    cache_ram: int = 8192
    kv_unified: bool | None = None
    cache_idle_slots: bool = True
    context_shift: bool = False
    flash_attn: str = 'auto'
    perf: bool = False
    escape: bool = True
    reverse_prompt: list[str] = Field(default_factory=lambda: [])
    special: bool = False
    warmup: bool = True
    spm_infill: bool = False
    samplers: str = 'penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature'
    seed: int = -1
    sampling_seq: str = 'edskypmxt'
    ignore_eos: bool = False
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    typical_p: float = 1.0
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breaker: list[str] = Field(default_factory=lambda: ['\n', ':', '"', '*'])
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    dynatemp_range: float = 0.0
    dynatemp_exp: float = 1.0
    mirostat: int = 0
    mirostat_lr: float = 0.1
    mirostat_ent: float = 5.0
    logit_bias: list[str] = Field(default_factory=lambda: [])
    grammar: str | None = None
    grammar_file: str | None = None
    json_schema: str | None = None
    json_schema_file: str | None = None
    backend_sampling: bool = False
    pooling: str | None = None
    rope_scaling: str | None = None
    rope_scale: float | None = None
    rope_freq_base: float | None = None
    rope_freq_scale: float | None = None
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_slow: float = -1.0
    yarn_beta_fast: float = -1.0
    kv_offload: bool = True
    repack: bool = True
    no_host: bool = False
    cache_type_k: str = 'f16'
    cache_type_v: str = 'f16'
    defrag_thold: float | None = None
    parallel: int = -1
    cont_batching: bool = True
    mmproj: str | None = None
    mmproj_url: str | None = None
    mmproj_auto: bool = True
    mmproj_offload: bool = True
    mmproj_device: str = 'auto'
    image_min_tokens: int | None = None
    image_max_tokens: int | None = None
    mtmd_batch_max_tokens: int = 1024
    rpc: str | None = None
    mlock: bool = False
    mmap: bool | None = None
    direct_io: bool | None = None
    load_mode: str = 'auto'
    numa: str | None = None
    device: str | None = None
    list_devices: bool = False
    override_tensor: list[str] = Field(default_factory=lambda: [])
    cpu_moe: bool = False
    n_cpu_moe: int = 0
    n_gpu_layers: str = 'auto'
    split_mode: str | None = None
    tensor_split: str | None = None
    main_gpu: int = 0
    fit: str = 'on'
    fit_target: str = '1024'
    fit_ctx: int = 4096
    check_tensors: bool = False
    override_kv: list[str] = Field(default_factory=lambda: [])
    op_offload: bool = True
    lora: list[str] = Field(default_factory=lambda: [])
    lora_scaled: list[tuple[str, float]] = Field(default_factory=lambda: [])
    control_vector: list[str] = Field(default_factory=lambda: [])
    control_vector_scaled: list[str] = Field(default_factory=lambda: [])
    control_vector_layer_range: list[str] | None = None
    alias: list[str] = Field(default_factory=lambda: [])
    tags: list[str] = Field(default_factory=lambda: [])
    model: str | None = None
    model_url: str | None = None
    docker_repo: str | None = None
    hf_repo: str | None = None
    hf_file: str | None = None
    hf_token: str | None = None
    embd_normalize: int = 2
    host: str = '127.0.0.1'
    port: int = 8080
    reuse_port: bool = False
    path: str = ''
    cors_origins: str = '*'
    cors_methods: str = 'GET, POST, DELETE, OPTIONS'
    cors_headers: str = '*'
    cors_credentials: bool = True
    api_prefix: str = ''
    webui_config: str | None = None
    webui_config_file: str | None = None
    webui_mcp_proxy: bool = False
    tools: str | None = None
    tools_runtime: str | None = None
    mcp_servers_config: str | None = None
    mcp_servers_json: str | None = None
    agent: bool = False
    webui: bool = True
    embeddings: bool = False
    reranking: bool = False
    api_key: list[str] = Field(default_factory=lambda: [])
    api_key_file: str | None = None
    ssl_key_file: str | None = None
    ssl_cert_file: str | None = None
    chat_template_kwargs: str | None = None
    timeout: int = 3600
    sse_ping_interval: int = 30
    threads_http: int = -1
    cache_prompt: bool = True
    cache_reuse: int = 0
    metrics: bool = False
    props: bool = False
    slots: bool = True
    slot_save_path: str | None = None
    media_path: str | None = None
    models_dir: str | None = None
    models_preset: str | None = None
    models_max: int = 4
    models_autoload: bool = True
    jinja: bool = True
    reasoning_format: str = 'deepseek'
    reasoning: str = 'auto'
    reasoning_effort: str = 'default'
    reasoning_budget: int = -1
    reasoning_budget_message: str | None = None
    reasoning_preserve: bool | None = None
    chat_template: str | None = None
    chat_template_file: str | None = None
    skip_chat_parsing: bool = False
    prefill_assistant: bool = True
    slot_prompt_similarity: float = 0.1
    lora_init_without_apply: bool = False
    sleep_idle_seconds: int = -1
    log_disable: bool = False
    log_file: str | None = None
    log_prompts_dir: str | None = None
    log_colors: str = 'auto'
    log_verbose: bool = False
    offline: bool = False
    log_verbosity: int = 3
    log_prefix: bool = False
    log_timestamps: bool = False
    hf_repo_draft: str | None = None
    threads_draft: int = -1
    threads_batch_draft: int = -1
    cpu_mask_draft: str = ''
    cpu_range_draft: str | None = None
    cpu_strict_draft: int = 0
    prio_draft: int = 0
    poll_draft: int = 50
    cpu_mask_batch_draft: str = ''
    cpu_strict_batch_draft: int = 0
    prio_batch_draft: int = 0
    poll_batch_draft: int = 50
    cache_type_k_draft: str = 'f16'
    cache_type_v_draft: str = 'f16'
    override_tensor_draft: list[str] = Field(default_factory=lambda: [])
    cpu_moe_draft: bool = False
    n_cpu_moe_draft: int = 0
    spec_draft_n_max: int = 3
    spec_draft_n_min: int = 0
    draft_p_split: float = 0.1
    draft_p_min: float = 0.0
    spec_draft_backend_sampling: bool = True
    device_draft: str | None = None
    n_gpu_layers_draft: str = 'auto'
    model_draft: str | None = None
    spec_type: list[str] = Field(default_factory=lambda: [])
    spec_ngram_mod_n_min: int = 48
    spec_ngram_mod_n_max: int = 64
    spec_ngram_mod_n_match: int = 24
    spec_ngram_simple_size_n: int = 12
    spec_ngram_simple_size_m: int = 48
    spec_ngram_simple_min_hits: int = 1
    spec_ngram_map_k_size_n: int = 12
    spec_ngram_map_k_size_m: int = 48
    spec_ngram_map_k_min_hits: int = 1
    spec_ngram_map_k4v_size_n: int = 12
    spec_ngram_map_k4v_size_m: int = 48
    spec_ngram_map_k4v_min_hits: int = 1
    draft_max: str | None = None
    draft_n_min: str | None = None
    spec_ngram_size_n: str | None = None
    spec_ngram_size_m: str | None = None
    spec_ngram_min_hits: str | None = None
    embd_gemma_default: bool = False
    fim_qwen_1_5b_default: bool = False
    fim_qwen_3b_default: bool = False
    fim_qwen_7b_default: bool = False
    fim_qwen_7b_spec: bool = False
    fim_qwen_14b_spec: bool = False
    fim_qwen_30b_default: bool = False
    gpt_oss_20b_default: bool = False
    gpt_oss_120b_default: bool = False
    vision_gemma_4b_default: bool = False
    vision_gemma_12b_default: bool = False
    spec_default: bool = False
    config: str | None = None
    admin_listen: str | None = None
    admin_token_file: str | None = None
    watch_config: bool = False
    model_store_root: str | None = None
    cpu_blas: str = 'auto'
    cpu_gemv: str = 'auto'
    cpu_jit: str = 'auto'
    worker_affinity: str = 'auto'
    shutdown_timeout: float = 30.0
    timeout_header: float = 10.0
    timeout_idle: float = 5.0
    connections_max: int = 0
    state_dir: str | None = None
    webui_store: bool = True
    cache_disk: str | None = None
    cache_disk_max: int = 16384
    models_wait_timeout: float = 30.0
    rpc_backend: str = 'ring'
    rpc_token_file: str | None = None
