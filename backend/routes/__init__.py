"""The API's routers, one module per resource, collected here."""

from backend.routes import catalog, events, health, runs, sweeps

ROUTERS = [health.router, catalog.router, runs.router, sweeps.router, events.router]
