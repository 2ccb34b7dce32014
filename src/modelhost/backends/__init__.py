"""Backends: the runtimes that execute a model. The contract is in api.py, the table of backends in registry.py,
and each backend is a package of its own.

Nothing is imported here: the python backend's stub processes import `modelhost.backends.python`, and every
module this file pulled in (the contract, the registry, grpc through errors.py) would be memory in each stub.
"""
