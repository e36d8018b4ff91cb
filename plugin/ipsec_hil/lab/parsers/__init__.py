"""One parser per command: `parse(text, ...) -> frozen dataclass`, ParseError otherwise.

Pure functions over captured output (no paramiko, no pytest): the appliance layer runs
the command, these turn its output into typed values. Golden files in tests/golden/.
"""
from ._base import ParseError

MODULES = (
    "sysctl",
    "netstat_esp",
    "netstat_if",
    "netstat_ip",
    "netstat_ipsec",
    "swanctl_list_sas",
    "swanctl_list_sas_raw",
    "swanctl_initiate",
    "swanctl_load",
    "ping",
    "iperf3",
    "kldstat",
    "md5",
    "ifconfig",
    "setkey",
    "setkey_spd",
    "route_get",
    "ip_route",
    "netstat_m",
    "vmstat_z",
    "vmstat_m",
    "dmesg",
    "boottime",
    "osversion",
    "cputime",
    "cpu_window",
)

__all__ = ["ParseError", "MODULES"]
