"""mlxd: LLM inference from MLX checkpoints with llama-server b10621's command line and HTTP surface."""

__version__ = "0.1.0"
