"""Configuration sources: each reads one explicit snapshot (argv, env, file bytes) into a Layer of settings with
provenance."""
