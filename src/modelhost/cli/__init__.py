"""The command line: `modelhost` (main.py, its flags and docs) and the SageMaker entry (sagemaker.py)."""
