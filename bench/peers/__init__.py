"""Servers the harness installs, starts and stops: chunkmq itself and the three peers."""
