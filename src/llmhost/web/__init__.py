"""What every llmhost HTTP front end shares (the replica server, the endpoint's router and admin API, the
console): ASGI middleware (request ids, draining, API keys, body limits), the error body of each API,
SageMaker's event streams and runtime wire format, and the OpenAPI document's helpers. It knows no
engine and no front end: those import it."""
