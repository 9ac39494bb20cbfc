"""Developer tools: synthetic checkpoints and adapters for tests, benchmarks and ``mlxd dev``; never imported by the
runtime."""
