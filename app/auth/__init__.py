"""Authentication and authorisation: API tokens, passwords, RabbitMQ-style permissions, bootstrap.

Import the submodules directly (`from chunkmq.auth.permissions import Permissions`); this package does
not import them, because app/meta uses tokens/passwords/permissions while bootstrap uses app/meta.
"""
