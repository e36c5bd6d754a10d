"""Every error code the API answers with, and its HTTP status: the one table of API.md's error codes.

A code names what went wrong; its status says which class of error it is. The names may change, the
strings may not: clients match on them (app/client/errors.py derives its table from this one, which
is why it lives beside the wire format: the client imports it without the server).
"""

from __future__ import annotations

# 400: the request is not acceptable as sent
INVALID_BODY = "invalid_body"  # a field has the wrong type or value, an unknown field, not JSON
INVALID_NAME = "invalid_name"  # an exchange, queue, group or consumer name
INVALID_REQUEST = "invalid_request"  # a query or path parameter
INVALID_ACK = "invalid_ack"  # an ack of offsets the group has not delivered
INVALID_HOST = "invalid_host"  # the Host header names another server (DNS rebinding)
# 401, 403
UNAUTHORIZED = "unauthorized"
FORBIDDEN = "forbidden"
CROSS_ORIGIN = "cross_origin"  # a browser request from another site (CHUNKMQ_AUTH=off)
# 404
NOT_FOUND = "not_found"  # no such route
EXCHANGE_NOT_FOUND = "exchange_not_found"
QUEUE_NOT_FOUND = "queue_not_found"
GROUP_NOT_FOUND = "group_not_found"
BINDING_NOT_FOUND = "binding_not_found"
MESSAGE_NOT_FOUND = "message_not_found"
TOKEN_NOT_FOUND = "token_not_found"
RULE_NOT_FOUND = "rule_not_found"  # an alert rule id
# 405
METHOD_NOT_ALLOWED = "method_not_allowed"
# 409
PRECONDITION_FAILED = "precondition_failed"  # a redeclare with other settings, a delete that loses messages
ALREADY_EXISTS = "already_exists"
SMTP_NOT_CONFIGURED = "smtp_not_configured"  # a test mail while CHUNKMQ_SMTP_HOST is not set
# 413
MESSAGE_TOO_LARGE = "message_too_large"
BATCH_TOO_LARGE = "batch_too_large"  # a publish body or batch over the limits
BODY_TOO_LARGE = "body_too_large"  # any other request body over its limit
# 415
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
# 422
UNROUTABLE = "unroutable"
# 429
QUEUE_FULL = "queue_full"
# 500: the server's fault, logged with its stack trace (never sent)
INTERNAL_ERROR = "internal_error"
STORAGE_ERROR = "storage_error"
CORRUPT_CHUNK = "corrupt_chunk"
METADATA_ERROR = "metadata_error"
# 502
SMTP_FAILED = "smtp_failed"  # the SMTP server could not be reached or refused a test mail
# 503
UNAVAILABLE = "unavailable"  # shutting down, the database is busy
OVERLOADED = "overloaded"  # past CHUNKMQ_MAX_CONNECTIONS open connections
# 507
STORAGE_FULL = "storage_full"

STATUS: dict[str, int] = {
    INVALID_BODY: 400, INVALID_NAME: 400, INVALID_REQUEST: 400, INVALID_ACK: 400, INVALID_HOST: 400,
    UNAUTHORIZED: 401, FORBIDDEN: 403, CROSS_ORIGIN: 403,
    NOT_FOUND: 404, EXCHANGE_NOT_FOUND: 404, QUEUE_NOT_FOUND: 404, GROUP_NOT_FOUND: 404,
    BINDING_NOT_FOUND: 404, MESSAGE_NOT_FOUND: 404, TOKEN_NOT_FOUND: 404, RULE_NOT_FOUND: 404,
    METHOD_NOT_ALLOWED: 405,
    PRECONDITION_FAILED: 409, ALREADY_EXISTS: 409, SMTP_NOT_CONFIGURED: 409,
    MESSAGE_TOO_LARGE: 413, BATCH_TOO_LARGE: 413, BODY_TOO_LARGE: 413,
    UNSUPPORTED_MEDIA_TYPE: 415,
    UNROUTABLE: 422,
    QUEUE_FULL: 429,
    INTERNAL_ERROR: 500, STORAGE_ERROR: 500, CORRUPT_CHUNK: 500, METADATA_ERROR: 500,
    SMTP_FAILED: 502,
    UNAVAILABLE: 503, OVERLOADED: 503,
    STORAGE_FULL: 507,
}
