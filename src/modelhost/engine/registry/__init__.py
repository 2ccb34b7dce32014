"""The model registry: versions, their lifecycle and builds, ensembles' dependencies, the memory budget."""
