"""Host.run_file: a script file run with the caller's bytes as its raw stdin, streamed.

Why: the wire sender paces a jumbo sweep's 40 MB of frames; through run()'s here-document
it could start only once all of them had arrived (issue 15). run_file's stdin must be
byte-exact, must reach the script while the caller is still sending, and its command
string must stay one csh cannot misread (the login shell on OPNsense is csh; the test sshd
gives the user tcsh).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from ipsec_hil.lab.remote import LocalHost
from ipsec_hil.lab.remote import ssh as ssh_mod
from ipsec_hil.lab.remote.shell import script_file_command


BIG = 16 << 20


@pytest.fixture(params=["ssh", "local"])
def host(request):
    if request.param == "ssh":
        return request.getfixturevalue("ssh_host")
    return LocalHost("bench")


@pytest.fixture
def scratch(host):
    d = f"/tmp/hil-runfile-{os.urandom(4).hex()}"
    host.run(f"mkdir -p {d}", timeout=10).check("mkdir")
    yield d
    host.run(f"rm -rf {d}", timeout=10)


def write_script(host, path: str, body: str) -> None:
    host.run(f"cat > {path} <<'EOF'\n{body}\nEOF\n", timeout=10).check("write script")


def test_stdin_arrives_byte_exact(host, scratch):
    data = (bytes(range(256)) * 4096 + b"__IPSEC_HIL_STDIN_EOF__\n'\"$!`\\\n\x00") * 3  # 3 MB and the awkward bytes
    path = f"{scratch}/copy.sh"
    write_script(host, path, f"cat > {scratch}/got\nwc -c < {scratch}/got")
    r = host.run_file(path, stdin=data, timeout=60).check("run_file")
    assert int(r.stdout.strip()) == len(data)
    assert host.read_file(f"{scratch}/got") == data


def test_the_script_runs_while_its_stdin_is_still_being_sent(ssh_host, monkeypatch):
    """The script reads 4 bytes, says it started and waits: 16 MB cannot all be in flight
    (an SSH window and a pipe hold a few MB), so the sending has not ended when the script
    has started -- with a here-document nothing starts before the last byte arrived. (Over
    SSH, where the channel's sending can be watched; LocalHost writes to a pipe.)"""
    host = ssh_host
    scratch = f"/tmp/hil-runfile-{os.urandom(4).hex()}"
    host.run(f"mkdir -p {scratch}", timeout=10).check("mkdir")
    sent_all = threading.Event()
    real = ssh_mod.send_all

    def watched(chan, data, *a, **kw):
        real(chan, data, *a, **kw)
        if len(data) == BIG:  # not the polls' own scripts
            sent_all.set()

    monkeypatch.setattr(ssh_mod, "send_all", watched)
    path = f"{scratch}/late.sh"
    write_script(host, path, f"head -c 4 > /dev/null\ntouch {scratch}/started\n"
                             f"while [ ! -f {scratch}/go ]; do sleep 0.05; done\nwc -c")
    data = os.urandom(BIG)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(r=host.run_file(path, stdin=data, timeout=120)))
    t.start()
    try:
        deadline = time.monotonic() + 30
        while host.run(f"[ -f {scratch}/started ]", timeout=10).status != 0:
            assert time.monotonic() < deadline, "the script never started"
            time.sleep(0.05)
        assert not sent_all.is_set(), "the whole stdin had been sent before the script read a byte"
    finally:
        host.run(f"touch {scratch}/go", timeout=10)
        t.join(120)
        host.run(f"rm -rf {scratch}", timeout=10)
    assert sent_all.is_set() and int(out["r"].stdout.strip()) == len(data) - 4


def test_a_failing_script_gives_its_status_and_stderr(host, scratch):
    path = f"{scratch}/fail.sh"
    write_script(host, path, "cat > /dev/null\necho nope >&2\nexit 3")
    r = host.run_file(path, stdin=b"x" * 1000, timeout=30)
    assert (r.status, r.stderr.strip()) == (3, "nope")


def test_a_script_that_ends_before_reading_its_stdin_still_gives_its_status(host, scratch):
    path = f"{scratch}/early.sh"
    write_script(host, path, "echo gone before reading >&2\nexit 4")
    r = host.run_file(path, stdin=os.urandom(BIG), timeout=60)
    assert (r.status, r.stderr.strip()) == (4, "gone before reading")


@pytest.mark.parametrize("path", ["relative.sh", "/tmp/a b.sh", "/tmp/x;rm -rf ~", "/tmp/$HOME.sh",
                                  "/tmp/a`id`.sh", "/tmp/../etc/x.sh", "/tmp/!1.sh", "/tmp/a>b"])
def test_a_path_csh_could_misread_is_refused_before_anything_runs(host, path):
    with pytest.raises(ValueError, match="run_file"):
        host.run_file(path, stdin=b"", timeout=5)


def test_the_command_string_is_sh_and_the_path():
    assert script_file_command("/tmp/hil-wire-0a1b2c-send.sh") == "/bin/sh /tmp/hil-wire-0a1b2c-send.sh"
