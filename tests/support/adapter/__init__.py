"""Knative's real ApiServerSource receive adapter, built from knative.dev/eventing and run
outside a cluster for the e2e tests (see launcher.py and gomod/)."""
