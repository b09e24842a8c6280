"""One Dash page a file; each module registers its page on import and has `register(app)` for its
callbacks."""
