"""The gRPC service: servicer, server assembly, interceptors."""
