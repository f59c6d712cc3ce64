"""torpor's benchmarks: ``python -m bench`` runs them all (see bench/run_all.py)."""
