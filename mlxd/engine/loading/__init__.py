"""From a model reference to a loaded model: the checkpoint, hub cache, placement, RoPE, KV types, LoRA, warmup."""
