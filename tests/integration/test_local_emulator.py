"""The local stack's Pub/Sub emulator, as `up` and the tests run it."""

import psutil

from shared.localstack.components import EMULATOR_JVM_OPTS, _java_opts
from tests.support import wait_for


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


def test_a_managed_process_runs_niced_through_the_nice_command(tmp_path, monkeypatch):
    from shared.localstack.process import ManagedProcess, niced

    assert niced(0) == []
    assert niced(10)[1:] == ["-n", "10"] and niced(10)[0].endswith("nice")
    with monkeypatch.context() as without:
        without.setenv("PATH", str(tmp_path))  # no `nice` here: normal priority
        assert niced(10) == []
    proc = ManagedProcess("sleeper", ["sleep", "30"], tmp_path / "sleeper.log", nice=7)
    proc.start()
    try:
        child = psutil.Process(proc.pid)
        # `nice` lowers its own priority, then runs sleep in its place (same pid).
        wait_for(lambda: child.cmdline() == ["sleep", "30"], 10, "nice to exec sleep")
        assert child.nice() == 7
    finally:
        proc.stop(2)
