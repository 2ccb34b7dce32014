"""Triton's own qa suites run against modelhost: see scripts/triton_qa.py."""
