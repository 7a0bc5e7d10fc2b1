"""The memevo wire contract, generated from proto/memevo/v1 (see scripts/gen_protos.py)."""
