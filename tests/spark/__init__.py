"""Settings for every Spark session the tests start (the test run's own and tests/spark/cluster_job.py's)."""

# The JVMs of a test run live for seconds to minutes: C1 alone and the serial collector cost about
# half the CPU time of the default C2 compiler and parallel GC threads there (on two cores).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_TEST_CONF = {
    "spark.driver.extraJavaOptions": JVM_OPTIONS,
    "spark.executor.extraJavaOptions": JVM_OPTIONS,  # local-cluster's executor JVMs
}
