"""The HTTP/REST frontend: KServe v2 with Triton's extensions, on a small asyncio protocol over httptools."""
