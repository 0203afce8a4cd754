"""The FastAPI service: `create_app(settings)` in factory.py, routes in routes/, the verbs they share with the
console in service.py, shared state in state.py."""
