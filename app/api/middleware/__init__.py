"""The app's ASGI middleware, one per module: `request_guard` (body limits, abandoned requests), `metrics`
(request counts and latency), `security_headers` (the console's headers). `create_app` adds them."""
