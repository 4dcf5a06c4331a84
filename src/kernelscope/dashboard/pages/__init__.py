"""Dashboard pages. Each module has ``layout(store, ...)`` returning Dash components; ``app.create_app``
routes URLs to them explicitly."""
