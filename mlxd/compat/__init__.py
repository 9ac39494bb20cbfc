"""The llama-server b10621 compat manifest (package data), its validator and report."""
