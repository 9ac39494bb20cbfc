"""Continuous batching: the model worker thread, its scheduler, the decode batch, slots and the prompt cache."""
