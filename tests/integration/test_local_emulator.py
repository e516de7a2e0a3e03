"""The local stack's Pub/Sub emulator, as `up` and the tests run it."""

import psutil

from services.dev.localstack.emulator import EMULATOR_JVM_OPTS, _java_opts


def test_the_emulator_jvm_runs_with_the_c1_compiler_and_the_serial_collector(stack):
    emulator = next(p for p in stack.processes if p.name == "pubsub-emulator")
    # The SDK's script execs java, so the JVM is the process the stack started.
    java = [psutil.Process(pid) for pid in emulator.group_pids()]
    argvs = [p.cmdline() for p in java if p.name() == "java"]
    assert len(argvs) == 1, argvs
    argv = argvs[0]
    assert "-XX:TieredStopAtLevel=1" in argv
    assert "-XX:+UseSerialGC" in argv
    assert argv.index("-XX:TieredStopAtLevel=1") < argv.index("-jar")


def test_the_users_java_opts_come_after_ours_so_they_win():
    assert _java_opts("") == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert _java_opts("-Xmx256m -XX:TieredStopAtLevel=4").split() == [
        *EMULATOR_JVM_OPTS,
        "-Xmx256m",
        "-XX:TieredStopAtLevel=4",
    ]
    # Two collectors stop the JVM at start-up: a collector the user chose replaces ours,
    # in JAVA_OPTS or in CLOUD_PUBSUB_EMULATOR_OPTS.
    assert _java_opts("-XX:+UseG1GC") == "-XX:TieredStopAtLevel=1 -XX:+UseG1GC"
    assert _java_opts("", "-XX:+UseParallelGC") == "-XX:TieredStopAtLevel=1"
