"""The benchmarks' own helpers."""

from pathlib import Path


def test_machine_time_reports_the_stolen_and_idle_shares_between_two_readings(tmp_path: Path):
    from bench.common import MachineTime, describe_machine

    stat = tmp_path / "stat"
    #                 user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  1000 0 500 8000 10 0 20 100 50 0\ncpu0 1 2 3\n")
    machine = MachineTime(stat)
    # 200 ticks later: 60 user, 20 system, 100 idle, 20 stolen (guest is in user already)
    stat.write_text("cpu  1060 0 520 8100 10 0 20 120 80 0\ncpu0 1 2 3\n")
    report = machine.report()
    assert report == {"steal_percent": 10.0, "idle_percent": 50.0}
    assert describe_machine(report) == (
        "machine during the measurement: 10.0% of the CPU time stolen by the hypervisor, 50.0% idle"
    )
    assert MachineTime(tmp_path / "missing").report() == {}
    assert describe_machine({}) == "machine: no /proc/stat steal counter here"
