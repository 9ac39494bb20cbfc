"""mlxd's facts about every option, as one compact table.

The upstream facts (spellings, env names, kind, category) come from the packaged b10621 inventory; this table adds
what mlxd decides: the value type, the typed default, the domain, live or restart, and how mlxd treats the option.

Each row is ``name type default attribute...`` (shell-quoted). Types: ``int float str bool list pair`` with a
trailing ``?`` for "may be unset" (None). ``~`` is None, ``[]`` an empty list. Attributes:

- ``restart``: a change needs a restart (listeners); every other option is live.
- ``secret``: redacted in every rendering.
- ``acc``: the env value and the command-line values accumulate (docs/precedence.md rule 1.4).
- ``append``: repeating the argument appends instead of replacing (rule 1.9).
- ``split``: a value is a comma-separated list.
- ``{a,b}``: the accepted words; ``>=N`` / ``N..M``: the accepted integer or float range; ``dom=NAME``: a custom
  domain check in :mod:`mlxd.config.values`.
- treatment: ``deferred`` (the default for b10621 rows: parsed and typed, behaviour comes with the engine, API or
  admin), ``supported``, ``inert`` (any valid value has no effect under MLX), ``inert=a|b`` (those values are inert,
  others are refused), ``refuse`` (any value but the default is refused), ``removed`` (b10621 itself rejects it),
  ``check=NAME`` (a custom refusal rule in :mod:`mlxd.config.refusals`).
- ``effect=A,B``: what a change does to a running daemon (:data:`EFFECTS`), where it differs from the default: a
  ``restart`` row is ``restart``; a row whose values are all inert or refused does nothing (``live``); any other row
  takes its category's effect (:data:`CATEGORY_EFFECTS`).
- ``why=KEY``: the refusal reason in :data:`mlxd.config.reasons.REASONS` (defaults to the option's own entry there,
  then its category).
"""

from __future__ import annotations

B10621_ROWS = r"""
usage                   bool   false       restart
version                 bool   false       restart
cache-list              bool   false       restart
completion-bash         bool   false       restart
threads                 int    -1          >=-1 restart
threads-batch           int    -1          >=-1 inert why=threads-batch
cpu-mask                str    ""          refuse why=affinity
cpu-range               str?   ~           refuse why=affinity
cpu-strict              str    0           {0,1} inert=0 why=affinity
prio                    int    0           -1..3 inert=0 why=affinity
poll                    str    50          dom=percent inert
cpu-mask-batch          str    ""          refuse why=affinity
cpu-range-batch         str?   ~           refuse why=affinity
cpu-strict-batch        int    0           0..1 inert=0 why=affinity
prio-batch              int    0           -1..3 inert=0 why=affinity
poll-batch              int?   ~           0..100 inert
lookup-cache-static     str?   ~ effect=reload
lookup-cache-dynamic    str?   ~ effect=reload
ctx-size                int    0           >=0
n-predict               int    -1          >=-2
batch-size              int    2048        >=1
ubatch-size             int    512         >=1
keep                    int    0           >=-1
swa-full                bool   false       refuse why=swa-full
swa-checkpoints         int    32          >=0 inert=0|32 why=checkpoints
checkpoint-min-step     int    8192        >=0 inert why=checkpoints
cache-ram               int    8192        >=-1 effect=reload
kv-unified              bool?  ~ effect=reload
cache-idle-slots        bool   true        effect=reload
context-shift           bool   false effect=reload
flash-attn              str    auto        {on,off,auto} inert=on|auto
perf                    bool   false       refuse why=perf
escape                  bool   true        inert why=escape
reverse-prompt          list   []          append
special                 bool   false effect=reload
warmup                  bool   true effect=reload
spm-infill              bool   false
samplers                str    penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature
seed                    int    -1
sampling-seq            str    edskypmxt
ignore-eos              bool   false
temperature             float  0.8
top-k                   int    40          >=0
top-p                   float  0.95
min-p                   float  0.05
top-n-sigma             float  -1.0
xtc-probability         float  0.0
xtc-threshold           float  0.1
typical-p               float  1.0
repeat-last-n           int    64          >=-1
repeat-penalty          float  1.0
presence-penalty        float  0.0
frequency-penalty       float  0.0
dry-multiplier          float  0.0
dry-base                float  1.75
dry-allowed-length      int    2
dry-penalty-last-n      int    64          >=-1
dry-sequence-breaker    list   @breakers   append
adaptive-target         float  -1.0
adaptive-decay          float  0.9
dynatemp-range          float  0.0
dynatemp-exp            float  1.0
mirostat                int    0           0..2
mirostat-lr             float  0.1
mirostat-ent            float  5.0
logit-bias              list   []          append dom=logit_bias
grammar                 str?   ~
grammar-file            str?   ~
json-schema             str?   ~
json-schema-file        str?   ~
backend-sampling        bool   false       inert
pooling                 str?   ~           {none,mean,cls,last,rank} effect=reload
rope-scaling            str?   ~           {none,linear,yarn}
rope-scale              float? ~           check=rope
rope-freq-base          float? ~
rope-freq-scale         float? ~           check=rope
yarn-orig-ctx           int    0           >=0
yarn-ext-factor         float  -1.0        check=yarn-ext-factor
yarn-attn-factor        float  -1.0        check=yarn-attn-factor
yarn-beta-slow          float  -1.0
yarn-beta-fast          float  -1.0
kv-offload              bool   true        inert
repack                  bool   true        inert
no-host                 bool   false       inert
cache-type-k            str    f16         dom=ggml_type check=kv-type
cache-type-v            str    f16         dom=ggml_type check=kv-type
defrag-thold            float? ~           inert
parallel                int    -1          >=-1 effect=reload
cont-batching           bool   true effect=reload
mmproj                  str?   ~           refuse why=multimodal
mmproj-url              str?   ~           refuse why=multimodal
mmproj-auto             bool   true        supported effect=reload
mmproj-offload          bool   true        inert
mmproj-device           str    auto        inert=auto why=device
image-min-tokens        int?   ~           supported
image-max-tokens        int?   ~           supported
mtmd-batch-max-tokens   int    1024        inert
rpc                     str?   ~           check=rpc effect=reload
mlock                   bool   false       refuse
mmap                    bool?  ~           inert
direct-io               bool?  ~           inert
load-mode               str    auto        inert=auto
numa                    str?   ~           {distribute,isolate,numactl} refuse
device                  str?   ~           check=device
list-devices            bool   false       restart
override-tensor         list   []          split refuse why=placement
cpu-moe                 bool   false       acc refuse why=placement
n-cpu-moe               int    0           >=0 acc refuse why=placement
n-gpu-layers            str    auto        dom=ngl check=ngl
split-mode              str?   ~           {none,layer,row,tensor} check=split-mode effect=reload
tensor-split            str?   ~           check=tensor-split effect=reload
main-gpu                int    0           >=0 inert=0 why=multi-gpu
fit                     str    on          {on,off} inert
fit-target              str    1024        inert
fit-ctx                 int    4096        >=0 inert
check-tensors           bool   false       inert
override-kv             list   []          split refuse
op-offload              bool   true        inert
lora                    list   []          split append effect=adapters
lora-scaled             scaled []          split append effect=adapters
control-vector          list   []          split append refuse why=control-vector
control-vector-scaled   list   []          split append refuse why=control-vector
control-vector-layer-range pair? ~         refuse why=control-vector
alias                   list   []          split acc
tags                    list   []          split acc
model                   str?   ~           check=model
model-url               str?   ~           refuse
docker-repo             str?   ~           refuse
hf-repo                 str?   ~           check=hf-repo
hf-file                 str?   ~           refuse
hf-token                str?   ~           secret effect=reload,logging
embd-normalize          int    2           >=-1
host                    str    127.0.0.1   restart
port                    int    8080        0..65535 restart
reuse-port              bool   false       restart
path                    str    ""          supported check=path effect=live
cors-origins            str    *
cors-methods            str    "GET, POST, DELETE, OPTIONS"
cors-headers            str    *
cors-credentials        bool   true
api-prefix              str    ""          restart
webui-config            str?   ~           supported check=webui-config effect=live
webui-config-file       str?   ~           supported check=webui-config-file effect=live
webui-mcp-proxy         bool   false       refuse why=mcp
tools                   str?   ~           refuse why=tools
tools-runtime           str?   ~           refuse why=tools
mcp-servers-config      str?   ~           refuse why=mcp
mcp-servers-json        str?   ~           refuse why=mcp
agent                   bool   false       refuse why=agent
webui                   bool   true        supported effect=live
embeddings              bool   false effect=reload
reranking               bool   false effect=reload
api-key                 list   []          split acc secret effect=live,logging
api-key-file            str?   ~ effect=live,logging
ssl-key-file            str?   ~           restart
ssl-cert-file           str?   ~           restart
chat-template-kwargs    str?   ~           dom=json_object
timeout                 int    3600        >=0
sse-ping-interval       int    30
threads-http            int    -1          >=-1 restart
cache-prompt            bool   true effect=reload
cache-reuse             int    0           >=0         refuse why=cache-reuse
metrics                 bool   false
props                   bool   false
slots                   bool   true
slot-save-path          str?   ~
media-path              str?   ~           supported
models-dir              str?   ~ effect=pool
models-preset           str?   ~                       supported effect=pool
models-max              int    4           >=0         effect=pool
models-autoload         bool   true                    supported effect=pool
jinja                   bool   true                    supported effect=template
reasoning-format        str    deepseek    {none,auto,deepseek,deepseek-legacy}
reasoning               str    auto        {on,off,auto}
reasoning-effort        str    default
reasoning-budget        int    -1          >=-1
reasoning-budget-message str?  ~
reasoning-preserve      bool?  ~           refuse why=reasoning-preserve
chat-template           str?   ~ effect=template
chat-template-file      str?   ~ effect=template
skip-chat-parsing       bool   false
prefill-assistant       bool   true
slot-prompt-similarity  float  0.1 effect=reload
lora-init-without-apply bool   false effect=adapters
sleep-idle-seconds      int    -1          >=-1
log-disable             bool   false effect=logging
log-file                str?   ~ effect=logging
log-prompts-dir         str?   ~           refuse why=log-prompts-dir
log-colors              str    auto        {on,off,auto} effect=logging
log-verbose             bool   false effect=logging
offline                 bool   false
log-verbosity           int    3 effect=logging
log-prefix              bool   false effect=logging
log-timestamps          bool   false effect=logging
hf-repo-draft           str?   ~ effect=reload
threads-draft           int    -1          >=-1 inert why=threads-draft
threads-batch-draft     int    -1          >=-1 inert why=threads-draft
cpu-mask-draft          str    ""          refuse why=affinity
cpu-range-draft         str?   ~           refuse why=affinity
cpu-strict-draft        int    0           refuse why=affinity
prio-draft              int    0           refuse why=affinity
poll-draft              int    50          inert
cpu-mask-batch-draft    str    ""          refuse why=affinity
cpu-strict-batch-draft  int    0           refuse why=affinity
prio-batch-draft        int    0           refuse why=affinity
poll-batch-draft        int    50          inert
cache-type-k-draft      str    f16         dom=ggml_type check=kv-type
cache-type-v-draft      str    f16         dom=ggml_type check=kv-type
override-tensor-draft   list   []          split refuse why=placement
cpu-moe-draft           bool   false       acc refuse why=placement
n-cpu-moe-draft         int    0           >=0 acc refuse why=placement
spec-draft-n-max        int    3           >=0 effect=reload
spec-draft-n-min        int    0           >=0 effect=reload
draft-p-split           float  0.1
draft-p-min             float  0.0         0..1 effect=reload
spec-draft-backend-sampling bool true      inert
device-draft            str?   ~           check=device why=device effect=reload
n-gpu-layers-draft      str    auto        dom=ngl check=ngl why=ngl effect=reload
model-draft             str?   ~ effect=reload
spec-type               list   []          split acc append check=spec-type effect=reload
spec-ngram-mod-n-min    int    48          0..1024 effect=reload
spec-ngram-mod-n-max    int    64          0..1024 effect=reload
spec-ngram-mod-n-match  int    24          1..1024 effect=reload
spec-ngram-simple-size-n int   12          >=1 effect=reload
spec-ngram-simple-size-m int   48          >=1 effect=reload
spec-ngram-simple-min-hits int 1           >=1
spec-ngram-map-k-size-n int    12          1..1024 effect=reload
spec-ngram-map-k-size-m int    48          1..1024 effect=reload
spec-ngram-map-k-min-hits int  1           >=1 effect=reload
spec-ngram-map-k4v-size-n int  12          1..1024 effect=reload
spec-ngram-map-k4v-size-m int  48          1..1024 effect=reload
spec-ngram-map-k4v-min-hits int 1          >=1 effect=reload
draft-max               str?   ~           removed
draft-n-min             str?   ~           removed
spec-ngram-size-n       str?   ~           removed
spec-ngram-size-m       str?   ~           removed
spec-ngram-min-hits     str?   ~           removed
embd-gemma-default      bool   false       refuse why=builtin-preset
fim-qwen-1.5b-default   bool   false       refuse why=builtin-preset
fim-qwen-3b-default     bool   false       refuse why=builtin-preset
fim-qwen-7b-default     bool   false       refuse why=builtin-preset
fim-qwen-7b-spec        bool   false       refuse why=builtin-preset
fim-qwen-14b-spec       bool   false       refuse why=builtin-preset
fim-qwen-30b-default    bool   false       refuse why=builtin-preset
gpt-oss-20b-default     bool   false       refuse why=builtin-preset
gpt-oss-120b-default    bool   false       refuse why=builtin-preset
vision-gemma-4b-default bool   false       refuse why=builtin-preset
vision-gemma-12b-default bool  false       refuse why=builtin-preset
spec-default            bool   false       refuse why=builtin-preset
"""

# What a change of an option does to a running daemon; the reconcile path executes the union over the changed options.
EFFECTS: dict[str, str] = {
    "live": "the next request sees it (sampling defaults, limits, the API surface); nothing is reloaded",
    "template": "the chat template is read again; the weights stay loaded",
    "reload": "the model is loaded again: the new one loads before the old one drains, in-flight requests finish",
    "adapters": "LoRA: new scales apply live to the loaded adapters; another set of adapters reloads the model",
    "pool": "the router's pool is reconciled: models added, removed or redefined, limits changed",
    "logging": "logging is set up again (the redaction filter learns new secrets)",
    "restart": "reported as pending (status, metric, log) until the daemon restarts",
}
# The effect of an option whose row names none: the common options configure the model as it is loaded.
CATEGORY_EFFECTS: dict[str, tuple[str, ...]] = {"common": ("reload",)}

# mlxd's own options: ``name kind type default attribute...`` where kind is ``value`` or ``pair`` (``--x``/``--no-x``).
# Their env name is MLXD_ + the name in upper case with '_' for '-'.
MLXD_ROWS = r"""
config            value str?   ~          restart supported
admin-listen      value str?   ~          restart
admin-token-file  value str?   ~          restart effect=restart,logging
watch-config      pair  bool   false
model-store-root  value str?   ~ effect=reload
cpu-blas          value str    auto       {auto,system,packaged,bundled} restart
cpu-gemv          value str    auto       {auto,off} restart
cpu-jit           value str    auto       {auto,off} restart
worker-affinity   value str    auto       {auto,off} effect=reload
shutdown-timeout  value float  30.0       0..86400
timeout-header    value float  10.0       0..86400
timeout-idle      value float  5.0        0..86400
connections-max   value int    0          >=0
state-dir         value str?   ~          restart
webui-store       pair  bool   true       restart
cache-disk        value str?   ~ effect=reload
cache-disk-max    value int    16384      >=-1 effect=reload
models-wait-timeout value float 30.0     0..86400 effect=pool
rpc-backend       value str    ring       {ring,jaccl,nccl,auto} effect=reload
rpc-token-file    value str?   ~ effect=reload
"""

# One-line help for mlxd's own options (b10621's come from its help text).
MLXD_HELP = {
    "config": "TOML configuration file (keys are option names; [models.NAME] tables are per-model overlays)",
    "admin-listen": "admin listener: unix:PATH, HOST:PORT (needs --admin-token-file) or off (default: unix socket "
                    "$XDG_RUNTIME_DIR/mlxd/admin.sock, /run/mlxd/admin.sock for root, else /tmp/mlxd-$UID/admin.sock)",
    "admin-token-file": "file holding the bearer token the admin listener requires",
    "watch-config": "reload when the TOML file or the presets file changes (default: on when --config is given)",
    "model-store-root": "Hugging Face cache directory that --hf-repo downloads go to and router mode lists "
                        "(default: the hub's own cache)",
    "cpu-blas": "BLAS used by mlx's CPU backend: auto (the packaged OpenBLAS unless the system's is newer), system "
                "(OpenBLAS), packaged (the ngsolve-openblas wheel) or bundled",
    "cpu-gemv": "auto: with an OpenBLAS loaded by --cpu-blas, send mlx's matrix products of 1 to 32 rows (decode "
                "steps) to a kernel that reads each weight once for all rows, and other one-row products to "
                "OpenBLAS's matrix-vector kernel, through a few hundred lines of C that mlxd compiles with the "
                "machine's C compiler into $XDG_CACHE_HOME/mlxd (nothing changes where there is none); off: every "
                "product through sgemm",
    "cpu-jit": "auto: on Linux, have mlx build its fused CPU kernels (the compiled decode step, SwiGLU) for this "
               "machine's CPU and vectorised (g++ -march=native -fno-trapping-math -finline-limit=1000: the same bits "
               "as mlx's own build) in $XDG_CACHE_HOME/mlxd/cpu-jit, which becomes the daemon's TMPDIR; "
               "off: as mlx builds them, for a generic CPU, in $TMPDIR/mlx",
    "worker-affinity": "auto: on Linux with MLX on the CPU, pin each model worker and its MLX stream thread to the "
                       "CPU the worker starts on, under the batch scheduling policy, when its model reads at most "
                       "256 MiB of weights a token (a bigger one's step is mostly matrix products); off: leave both "
                       "to the kernel",
    "shutdown-timeout": "seconds a graceful shutdown waits for in-flight requests (streams to their last byte) "
                        "before ending them with an error",
    "timeout-header": "seconds a client has, from a request's first byte, to send the whole request head (0: no "
                      "limit)",
    "timeout-idle": "seconds a keep-alive connection may sit idle between requests (a new one before its first "
                    "byte too; 0: no limit)",
    "state-dir": "directory of mlxd's own state: the chat page's conversation store, webui.sqlite3 (default: "
                 "$STATE_DIRECTORY under systemd, else $XDG_STATE_HOME/mlxd, else ~/.local/state/mlxd)",
    "webui-store": "keep the chat page's conversations on the server, in SQLite under --state-dir, scoped per API key "
                   "(--no-webui-store: the page keeps them in the browser)",
    "models-wait-timeout": "router mode: seconds a request waits for room under --models-max when every model "
                           "there is loading, draining or busy; then 503 with Retry-After (b10621: 500 at once)",
    "connections-max": "open connections the public listener keeps; at the cap a new one replaces the longest "
                       "idle, or is refused with 503 when all are busy (0: the file-descriptor limit less a reserve, "
                       "at most 16384)",
    "rpc-backend": "--rpc: mx.distributed backend between the machines: ring (TCP, everywhere), jaccl (RDMA over "
                   "Thunderbolt on macOS), nccl (CUDA) or auto (the first that MLX can start)",
    "rpc-token-file": "--rpc: file holding the token every `mlxd rpc-server` requires (the same file on each machine; "
                      "required by an rpc-server off loopback)",
    "cache-disk": "directory of the prompt cache's disk tier: entries evicted from --cache-ram and those held at "
                  "shutdown are written there and reused after a restart or reload (default: off; the systemd "
                  "units give $CACHE_DIRECTORY)",
    "cache-disk-max": "size limit of the --cache-disk tier in MiB, least recently used entries go first (-1: no "
                      "limit, 0: read only)",
}

# The list default of --dry-sequence-breaker (help: ('\n', ':', '"', '*')).
DRY_SEQUENCE_BREAKERS = ["\n", ":", '"', "*"]
