"""Kubernetes integration: files generated from the host inventory for cluster components (docs/kubernetes.md)."""
