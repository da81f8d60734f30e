"""One module per resource; ROUTERS is the order they are mounted in."""

from strato.api.routes import (
    aggregates,
    allocation_candidates,
    allocations,
    health,
    inventories,
    reshaper,
    resource_classes,
    resource_providers,
    root,
    schedule,
    strato_providers,
    traits,
    ui,
    usages,
    zone,
)

ROUTERS = [
    root.router,
    ui.router,
    health.router,
    resource_providers.router,
    inventories.router,
    resource_classes.router,
    traits.router,
    aggregates.router,
    allocations.router,
    usages.router,
    reshaper.router,
    allocation_candidates.router,
    strato_providers.router,
    schedule.router,
    zone.router,
]

__all__ = ["ROUTERS"]
