"""The stateless HTTP service (Litestar) over the pure core.

`service.api.app.create_app(settings)` builds the app; `create_app_from_env` is the uvicorn factory.
Kept import-free so `vramdoc serve` can check settings without loading the web stack twice.
"""
