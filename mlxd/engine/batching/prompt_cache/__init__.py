"""The prompt cache: finished prompts' keys and values in RAM (``--cache-ram``) and on disk (``--cache-disk``)."""
