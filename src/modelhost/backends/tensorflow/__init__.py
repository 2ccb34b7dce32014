"""TensorFlow backend: `tensorflow_savedmodel` (a SavedModel's serving signature) and `tensorflow_graphdef` (a
GraphDef), each run in a TF1 session of TensorFlow 2 (tensorflow-cpu), as Triton's backend runs them.

TensorFlow itself is imported only by runtime.py, the first time a model needs it (docs/backends/tensorflow.md).
"""
