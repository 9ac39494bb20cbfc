"""The admin listener's routes and the `mlxd admin` client."""
