"""The server process: storage, the four layers, the gRPC service and the CLI."""
