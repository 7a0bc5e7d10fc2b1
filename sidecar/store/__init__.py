"""Storage: RocksDB (source of truth) and the usearch ANN index with its fresh tail."""
