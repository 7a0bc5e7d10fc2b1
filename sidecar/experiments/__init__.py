"""Online experiments: policies as arms that rank retrievals side by side (see arms.py)."""
