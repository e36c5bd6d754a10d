"""Side-by-side benchmark: chunkmq against RabbitMQ, Redis Streams and NATS JetStream.

`python -m bench` installs and starts every peer on 127.0.0.1, runs the same workloads against each
(one at a time, so they never compete for the CPU), stops every process it started and writes JSON lines
plus a markdown table to bench/results/. See docs/benchmarks.md for how to read the numbers.
"""
