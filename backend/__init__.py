"""The FastAPI backend: validates run specs, queues runs, serves history and live event streams."""
