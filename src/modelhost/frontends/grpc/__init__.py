"""The gRPC frontend: `inference.GRPCInferenceService` from the tritonclient package's generated modules."""
