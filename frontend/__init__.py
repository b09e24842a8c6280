"""The Dash front end: it talks only to the HTTP API and its event streams, never to torch."""
