"""A server process whose disk is slower: `env(ms)` is the environment that
adds `ms` milliseconds to each of its fsyncs (slowdisk.c, built here with the
system's C compiler and preloaded). Used to measure how the group commit
copes with a slow disk (a network block device, a busy host) on a machine
whose own disk is fast; Strato's code is the same either way."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("slowdisk.c")


def library() -> Path:
    """The shared library, built once per version of its source."""
    text = SOURCE.read_bytes()
    digest = hashlib.sha256(text).hexdigest()[:12]
    out = Path(tempfile.gettempdir()) / f"strato-slowdisk-{digest}.so"
    if not out.exists():
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise SystemExit("--slow-disk-ms needs a C compiler (apt-get install gcc)")
        tmp = out.with_suffix(".tmp")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl"],
                       check=True)
        tmp.replace(out)
    return out


def env(ms: float) -> dict[str, str]:
    """The environment for a server whose fsyncs take `ms` longer ({} for 0)."""
    if ms <= 0:
        return {}
    return {"LD_PRELOAD": str(library()), "STRATO_SLOWDISK_US": str(round(ms * 1000))}
