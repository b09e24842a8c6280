"""Starlette's WSGI adapter (to mount the Dash/Flask pages), without its deprecation warning, and
`pages_app(wsgi)`: the pages as served, compressed."""

import warnings
from typing import Any

from starlette.middleware.gzip import GZipMiddleware

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # StarletteDeprecationWarning: it still works in this pinned version
    from starlette.middleware.wsgi import WSGIMiddleware

__all__ = ["WSGIMiddleware", "pages_app"]


def pages_app(wsgi_app: Any) -> GZipMiddleware:
    """The Dash pages as an ASGI app, gzip-compressed for browsers that accept it: the scripts a page
    loads (most of a first visit's bytes) shrink several times over. Caching is Dash's
    own: its component bundles have fingerprinted URLs served with a year's max-age, /assets/ files an
    ETag (a repeat visit revalidates them with 304s)."""
    return GZipMiddleware(WSGIMiddleware(wsgi_app), minimum_size=1024, compresslevel=6)
