"""The controller's HTTP adapter: aiohttp routes under /api/v1, OpenAPI, JSON errors."""
