"""The FreeBSD commands against the real ESP engine (ipsec_hil_twin.engine) (not the test double).

A MiniLab (ipsec_hil_twin.engine.minilab: hostA | gwA | gwB | hostB, two engines) carries real
ESP; the appliance shell of gwA must then report what the engine really did: driver
counters moving with traffic, the installed SA (SPI and key) in `setkey -D`, kernel ESP
statistics as libxo JSON, and the inner IPv6 route going to the engine.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

import paramiko
import pytest

from ipsec_hil_twin.fbsd.install import install_bin
from ipsec_hil_twin.machinery.runtime import HostDir, write_json_atomic
from ipsec_hil_twin.shell.sshd import ApplianceSshServer, known_hosts_line, load_authorized_keys

from .conftest import NPUEP, Appliance, new_client_key

pytestmark = pytest.mark.needs_root


@pytest.fixture(scope="module")
def engine_appliance(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("tcsh"):
        pytest.skip("needs root and tcsh")
    from ipsec_hil_twin.engine import minilab
    lab = minilab.MiniLab(driver={"gA": "npuep", "gB": "octep"}, base=tmp_path_factory.mktemp("eng"))
    server = client = None
    try:
        lab.build(engines=False)
        hd = HostDir(lab.host_dir("gA"))
        host = json.loads(hd.host_json.read_text())
        host.update(counters=NPUEP, module_file="/boot/modules/npuep.ko")
        write_json_atomic(hd.host_json, host)
        mod = hd.rootpath("/boot/modules/npuep.ko")
        mod.parent.mkdir(parents=True, exist_ok=True)
        mod.write_bytes(b"\x7fELF npuep for the real engine test" * 100)
        rec = {"name": "npuep.ko", "file": "/boot/modules/npuep.ko",
               "md5": hashlib.md5(mod.read_bytes()).hexdigest(), "size": mod.stat().st_size}
        write_json_atomic(hd.state_json, {"boot_time": 1764448000.0, "driver": dict(rec, loaded=True, driver="npuep"),
                                          "modules": [{"name": "kernel", "file": "/boot/kernel/kernel", "size": 4096},
                                                      {"name": "ipsec.ko", "file": "/boot/kernel/ipsec.ko", "size": 2048},
                                                      rec]})
        for gw in ("gA", "gB"):
            lab.start_engine(gw)
        lab.call("gA", "set_driver", loaded=True, md5=rec["md5"], name="npuep")
        sas = lab.tunnel("aes-gcm-16", "ipv4", v6_routes=False)
        install_bin(hd)
        pkey, pub = new_client_key()
        (hd.path / "id.pub").write_text(pub + "\n")
        server = ApplianceSshServer(hd, load_authorized_keys(hd.path / "id.pub"))
        port = server.start()
        kh = hd.path / "known_hosts"
        kh.write_text(known_hosts_line(hd, port) + "\n")
        client = paramiko.SSHClient()
        client.load_host_keys(str(kh))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect("127.0.0.1", port=port, username="root", pkey=pkey, allow_agent=False, look_for_keys=False)
        yield lab, sas, Appliance(hd, lab.ns("gA"), lab.ns("gB"), client, server, None, kh, pkey, server.commands)
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        lab.close()


def test_commands_report_the_real_engine(engine_appliance):
    lab, sas, app = engine_appliance
    before = app.run("sysctl -n dev.npuep.0.ipsec.tx_accel dev.npuep.0.ipsec.tx_taken dev.npuep.0.ipsec.rx_done")
    assert before.status == 0, before.err
    b = [int(x) for x in before.out.split()]
    r = lab.run("hA", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.10"])
    assert r.returncode == 0, r.stdout + r.stderr
    after = app.run("sysctl -n dev.npuep.0.ipsec.tx_accel dev.npuep.0.ipsec.tx_taken dev.npuep.0.ipsec.rx_done")
    a = [int(x) for x in after.out.split()]
    assert a[1] + a[0] - b[1] - b[0] >= 3  # forwarded requests left through the association
    assert a[2] - b[2] >= 3  # replies decrypted and handed up
    assert app.run("sysctl -n dev.npuep.0.ipsec.sa_count").out == "2\n"

    out = app.run("setkey -D").out
    spi = sas["gA_out"]["spi"]
    assert f"\tesp mode=tunnel spi={spi}(0x{spi:08x}) reqid=1(0x00000001)\n" in out
    m = re.search(rf"spi={spi}\(.*?\n\tE: aes-gcm-16 ((?: [0-9a-f]{{8}})+)\n((?: [0-9a-f]{{8}})+)\n", out, re.S)
    assert m and (m.group(1) + m.group(2)).replace(" ", "") == sas["gA_out"]["enc_key"]

    doc = json.loads(app.run("netstat -s -p esp --libxo json").out)
    assert "esp-statictics" in doc["statistics"]

    r = app.run("route -6 add -net fd00:b::/64 2001:db8:0:1::2")
    assert (r.out, r.status) == ("add net fd00:b::/64: gateway 2001:db8:0:1::2\n", 0)
    assert "fd00:b::/64" in lab.call("gA", "status")["routes"]
    r = app.run("route -6 add -net fd00:b::/64 2001:db8:0:1::2")
    assert r.status == 1 and r.out.endswith(": route already in table\n")
    assert "esp0" not in app.run("ifconfig").out  # the engine's TUN is not the appliance's
