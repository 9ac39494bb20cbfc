"""Pydantic models of every wire format: native llama, OpenAI, Anthropic, admin, and the error envelope."""
