"""MLX inference: loading, synthetic checkpoints, the model worker and batch scheduler, sampling, prompt cache,
slots."""
