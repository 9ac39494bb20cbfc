"""Speculative decoding: a draft model or n-gram proposals, verified by rejection sampling inside the batch."""
