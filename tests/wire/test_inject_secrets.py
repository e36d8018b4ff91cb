"""Keys never leave ipsec_hil.lab.inject: not in the scripts or stdin the hosts get, not in
its logs (DEBUG), not in a repr or an error message (the artifact-wide search in
tests/safety/test_secrets.py covers a full run; this covers the injection's own paths)."""
from __future__ import annotations

import logging

import pytest

from ipsec_hil.lab.inject import Crafter, InjectError, Inner, WirePath, inject
from ipsec_hil.lab.remote.local import LocalHost
from tests.safety.test_secrets import forms

from .conftest import needs_root
from .test_inject_minilab import HA, HB, Sa, install

pytestmark = needs_root


class Recording:
    """A Host that keeps every script and stdin it was given."""

    def __init__(self, host: LocalHost) -> None:
        self.host, self.name, self.seen = host, host.name, []

    def run(self, script, *, timeout=None, stdin=None):
        self.seen += [script.encode(), stdin or b""]
        return self.host.run(script, timeout=timeout, stdin=stdin)

    def run_file(self, path, *, stdin, timeout=None):
        self.seen += [path.encode(), stdin]
        return self.host.run_file(path, timeout=timeout, stdin=stdin)


def leaked(sa: Sa, blobs: list[bytes]) -> list[str]:
    secrets_ = forms(sa.enc_key) | (forms(sa.auth_key) if sa.auth_key else set())
    return [f.decode(errors="replace")[:8] + "..." for f in secrets_ for b in blobs if f in b]


@pytest.mark.parametrize("cipher", ["aes-gcm-16", "aes-cbc-hmac-sha256"])
def test_no_key_in_scripts_stdin_logs_or_reprs(lab, cipher, caplog):
    caplog.set_level(logging.DEBUG)
    sa = install(lab, cipher=cipher)
    crafter = Crafter(sa)
    inner = Inner("ipv4", HB["ipv4"], HA["ipv4"])
    peer, bench = Recording(LocalHost("gB", netns=lab.ns("gB"))), Recording(LocalHost("hA", netns=lab.ns("hA")))
    frames = [crafter.frame(inner, i, i + 1, 100 + i, v) for i, v in
              enumerate([None, "icv_bit", "truncated", "unknown_spi"])]
    d = inject(peer, bench, WirePath(sa.dst, sa.src), inner, frames, crafter.end(inner, 10))
    assert d.times(frames[0]) == 1
    errors = []
    for bad in (lambda: crafter.seal(b"\x45" + bytes(40), 1 << 33), lambda: crafter.frame(inner, 0, 1, 10),
                lambda: Crafter(Sa(1, sa.src, sa.dst, "aes-cbc-hmac-sha256", sa.enc_key, None))):
        with pytest.raises(InjectError) as ei:
            bad()
        errors.append(str(ei.value).encode())
    blobs = peer.seen + bench.seen + errors + [caplog.text.encode(), repr(crafter).encode(), repr(d).encode(),
                                               repr(frames).encode()]
    assert leaked(sa, blobs) == []
