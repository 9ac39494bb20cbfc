"""Shaping engine events into the wire formats: native llama, OpenAI (completions, chat, responses), Anthropic."""
