"""PEM files: written atomically, so a server that reloads on change never reads half a file,
and the leaf of a certificate file read alone."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_pem(path: Path, data: bytes, *, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


_PEM_END = "-----END CERTIFICATE-----"


def leaf_pem(cert_file: str | Path) -> str:
    """The first certificate of `cert_file` (the leaf; what follows it is its chain)."""
    text = Path(cert_file).read_text()
    end = text.find(_PEM_END)
    if end < 0:
        raise ValueError(f"no certificate in {cert_file}")
    return text[: end + len(_PEM_END)] + "\n"
