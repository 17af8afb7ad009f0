"""The controller's HTTP adapter (aiohttp): routes under /api/v1, the OpenAPI document, JSON
errors, the event stream, job files, metrics.

    request ──guard_middleware (allow-lists, rate limits)──▶ auth (token -> identity)
            ──routes (one Route table: router + OpenAPI)──▶ jobs, queues, hosts, users, ...
            ──decode the body (xce/protocol)──▶ xce/controller (events, commit) ──▶ views

Bodies and answers are declared once in xce/protocol; a route decodes, asks the service and
renders a view (`views.py`); errors map the core's error classes to HTTP codes (`http.py`).
"""
