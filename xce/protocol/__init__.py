"""Every contract between XCE's parts, typed once: what clients send the API (bodies, admin and
auth bodies), what the API answers (schemas), and what workers and the controller say to each other
(worker). The API, the controller, the worker and the clients all import these; none of them lives
in an adapter."""
