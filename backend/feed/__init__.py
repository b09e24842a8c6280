"""The API's side of the live feed: `FeedHub` fans a run's events out to SSE clients (normlab.feed
writes them)."""
