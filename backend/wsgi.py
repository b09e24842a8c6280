"""Starlette's WSGI adapter (to mount the Dash/Flask pages), without its deprecation warning."""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # StarletteDeprecationWarning: it still works in this pinned version
    from starlette.middleware.wsgi import WSGIMiddleware

__all__ = ["WSGIMiddleware"]
