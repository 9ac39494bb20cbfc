"""The public HTTP surface (sanic): llama-server b10621's native routes and the OpenAI/Anthropic-compatible ones."""
