"""Pydantic models of the wire formats: native llama, OpenAI, Anthropic, admin. b10621's error envelope is built
in one place, mlxd.api.errors."""
