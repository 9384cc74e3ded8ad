"""`sparring serve`: a read-only HTTP API (JSON, documented at /docs) and web viewer over the store.

FastAPI with Jinja2 templates rendered on the server and HTMX (vendored in static/, no
build step, no CDN) for filtering, search and live updates. Modules: ``store`` (the engine,
read-only, and what happens when the database is down), ``security`` (bind rules, token,
headers), ``filters`` (query parameters to an EpisodeFilter), ``reads`` (what storage.queries
does not read: runs, lineage, comparisons), ``api`` and ``pages`` (the routes), ``app``.
"""
