"""The live feed: the worker's `EventWriter` (store + Redis Stream) and the API's `FeedHub` (fan-out)."""
