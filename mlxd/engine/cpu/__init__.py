"""The CPU under MLX: which BLAS its CPU backend calls, and keeping a worker on one core."""
