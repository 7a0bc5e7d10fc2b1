"""Evaluation: the value of every memory, computed by the kernels over the hot columns."""
