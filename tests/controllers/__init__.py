"""End to end through Knative's real ApiServerSource receive adapter (issue 4)."""
