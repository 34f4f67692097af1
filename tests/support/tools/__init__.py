"""Small build helpers for the deploy and container tests (kustomize, buildah images)."""
