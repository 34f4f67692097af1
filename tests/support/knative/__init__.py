"""Knative's real controllers (Eventing, Serving) run out of cluster on the test world."""
