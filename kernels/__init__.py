"""Numeric kernels: arrays in, arrays out (Numba, with NumPy references in tests/naive.py)."""
