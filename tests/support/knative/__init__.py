"""Knative's real components, run out of cluster for the tests."""
