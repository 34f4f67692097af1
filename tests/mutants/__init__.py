"""Seeded bugs and the runner that checks the fast tests catch each (`python -m tests.mutants`)."""
