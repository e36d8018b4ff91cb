"""ipsec_hil_twin.machinery.cpustat: busy and total seconds from /proc/stat's cpu line (guest time not twice)."""
from ipsec_hil_twin.machinery.cpustat import machine_cpu_seconds, parse_cpu_line


def test_busy_is_all_but_idle_and_iowait_and_guest_is_not_counted_twice():
    # user nice system idle iowait irq softirq steal guest guest_nice (proc(5)); guest 50 is in user 400
    line = "cpu  400 10 100 1000 40 5 15 20 50 0"
    busy, total = parse_cpu_line(line, 100)
    assert busy == (400 + 10 + 100 + 5 + 15 + 20) / 100
    assert total == busy + (1000 + 40) / 100


def test_this_machine_reads():
    busy, total = machine_cpu_seconds()
    assert 0 < busy < total
