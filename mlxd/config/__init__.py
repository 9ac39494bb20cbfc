"""Configuration: sources (defaults, config.ini, TOML, env, argv, presets) layered into one frozen Config with provenance."""
