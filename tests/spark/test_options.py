"""The options of `format("chunkmq")` (app/spark/options.py): Kafka's names, case-insensitive, each
bad value an OptionError naming the option; offsets resolved against the queues' first and next."""

from __future__ import annotations

import pytest

from chunkmq.spark.errors import OptionError
from chunkmq.spark.options import EARLIEST, LATEST, SourceOptions, _resolve

QUEUES = {"a": {"first_offset": 5, "next_offset": 50}, "b": {"first_offset": 0, "next_offset": 7}}


def test_defaults_differ_for_batch_and_streaming_reads() -> None:
    batch = SourceOptions.parse({"subscribe": "a, b"}, streaming=False)
    assert batch.subscribe == ("a", "b") and (batch.starting, batch.ending) == ("earliest", "latest")
    assert batch.url == "http://127.0.0.1:8000" and batch.fail_on_data_loss and batch.include_headers
    assert batch.max_per_partition == 1_000_000 and batch.min_partitions is None
    assert SourceOptions.parse({"subscribe": "a"}, streaming=True).starting == "latest"


def test_names_are_case_insensitive_and_values_parsed() -> None:
    opts = SourceOptions.parse({"subscribePattern": "a.*", "maxOffsetsPerTrigger": "10", "failOnDataLoss": "FALSE",
                                "startingTimestamp": "0", "token": "", "group": "spark"}, streaming=True)
    assert ((opts.pattern, opts.max_per_trigger, opts.fail_on_data_loss, opts.starting_timestamp)
            == ("a.*", 10, False, 0))
    assert opts.token is None and opts.group == "spark"


@pytest.mark.parametrize(("options", "says"), [
    ({}, "exactly one of"), ({"subscribe": "a", "subscribePattern": "a"}, "exactly one of"),
    ({"subscribePattern": "("}, "not a regular expression"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "must be an integer"),
    ({"subscribe": "a", "minPartitions": "0"}, "at least 1"),
    ({"subscribe": "a", "includeHeaders": "yes"}, "true or false"),
])
def test_each_bad_option_is_named(options: dict[str, str], says: str) -> None:
    with pytest.raises(OptionError, match=says):
        SourceOptions.parse(options, streaming=False)
    with pytest.raises(OptionError, match="batch reads only"):
        SourceOptions.parse({"subscribe": "a", "endingOffsets": "latest"}, streaming=True)


def test_offsets_resolve_against_the_queues() -> None:
    assert _resolve("earliest", QUEUES, "startingOffsets") == {"a": 5, "b": 0}
    assert _resolve(" latest ", QUEUES, "startingOffsets") == {"a": 50, "b": 7}
    assert _resolve(f'{{"a": 9, "b": {LATEST}}}', QUEUES, "startingOffsets") == {"a": 9, "b": 7}
    assert _resolve('{"a": 9}', QUEUES, "startingOffsets") == {"a": 9, "b": 0}  # the others from earliest
    assert _resolve('{"a": 9}', QUEUES, "endingOffsets") == {"a": 9, "b": 7}  # ... or up to latest
    assert _resolve(f'{{"b": {EARLIEST}}}', QUEUES, "endingOffsets") == {"a": 50, "b": 0}
    for bad, says in (("soon", "earliest, latest or a JSON"), ('{"a": -3}', "map queue names"),
                      ("[1]", "map queue names"), ('{"c": 1}', "not subscribed: c")):
        with pytest.raises(OptionError, match=says):
            _resolve(bad, QUEUES, "startingOffsets")
