"""The engine: an in-memory columnar index of a zone's providers, and the
pure candidate builder, filters and weighers that run over it."""

from strato.engine.candidates import Candidate, build
from strato.engine.index import ProviderIndex
from strato.engine.records import InventoryRecord, ProviderRecord
from strato.engine.request import CandidateRequest, GroupPolicy, RequestGroup
from strato.engine.service import (
    AllocationRequest,
    CandidateResult,
    Engine,
    EngineConfig,
)
from strato.engine.summaries import ProviderSummary, ResourceSummary
from strato.engine.weighers import Scorer, WeigherConfig

__all__ = [
    "AllocationRequest",
    "Candidate",
    "CandidateRequest",
    "CandidateResult",
    "Engine",
    "EngineConfig",
    "GroupPolicy",
    "InventoryRecord",
    "ProviderIndex",
    "ProviderRecord",
    "ProviderSummary",
    "RequestGroup",
    "ResourceSummary",
    "Scorer",
    "WeigherConfig",
    "build",
]
