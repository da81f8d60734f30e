"""The HTTP API: Placement-compatible routes and Strato's /strato/v1 routes."""

from strato.api.app import create_app

__all__ = ["create_app"]
