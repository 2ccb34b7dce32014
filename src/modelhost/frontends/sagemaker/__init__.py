"""The SageMaker listener (--allow-sagemaker): /ping, /invocations and the multi-model /models routes, on their own
port, as Triton's SageMaker server answers them (docs/sagemaker.md lists where modelhost answers better)."""
