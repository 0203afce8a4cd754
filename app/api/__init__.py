"""The FastAPI service: `create_app(settings)` in main.py, routes in routes/, shared state in state.py."""
