"""Certificates for the webhook and the local control plane: CA, serving and client certificates."""

from certs.files import write_pem
from certs.issue import KeyPair, expires_within, issue_ca, issue_leaf

__all__ = ["KeyPair", "expires_within", "issue_ca", "issue_leaf", "write_pem"]
