"""Leaving one machine: serving requirements, object storage, Kubernetes and KServe manifests."""
