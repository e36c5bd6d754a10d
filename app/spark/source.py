"""`format("chunkmq")`: the Spark data source (PySpark's Python Data Source API)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from chunkmq.spark.options import SourceOptions
from chunkmq.spark.reader import BatchReader, StreamReader
from chunkmq.spark.sink import BatchWriter, SinkOptions, StreamWriter

SCHEMA = ("queue string, offset bigint, id string, timestamp timestamp, exchange string, routing_key string, "
          "tag string, headers map<string,string>, body binary")
WITHOUT_HEADERS = SCHEMA.replace(" headers map<string,string>,", "")


class ChunkmqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "chunkmq"

    def schema(self) -> str:
        include = self.options.get("includeHeaders", "true").lower() != "false"
        return SCHEMA if include else WITHOUT_HEADERS

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        return BatchWriter(SinkOptions.parse(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        return StreamWriter(SinkOptions.parse(self.options, schema))
