"""What of Triton Inference Server modelhost serves: the data (surface.py) and docs/compatibility.md (page.py)."""
