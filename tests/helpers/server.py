"""Real server processes for end-to-end tests (the implementation lives in the package)."""

from strato.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
