"""The headless Chromium the benchmarks and browser tests drive (Debian's package; never downloaded):
its path and the flags that keep a measured page load free of the browser's own background work."""

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
