"""The API's routers, one module per resource, collected here."""

from backend.routes import (
    catalog,
    events,
    fork,
    groups,
    health,
    presets,
    replications,
    runs,
    scalars,
    sweeps,
    watched,
)

ROUTERS = [
    health.router,
    catalog.router,
    runs.router,
    scalars.router,
    sweeps.router,
    presets.router,
    replications.router,
    groups.router,
    events.router,
    fork.router,
    watched.router,
]
