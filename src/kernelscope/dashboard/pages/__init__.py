"""Dashboard pages. Each module has ``TITLE``, ``layout(store, ...)`` returning Dash components and
optionally ``register(app, db_path)`` for its callbacks; ``app.create_app`` routes URLs to them explicitly.
A page imports the shared pieces (``dashboard.urls``, ``params``, ``widgets``), never the app or another
page (import-linter contracts in pyproject.toml)."""
