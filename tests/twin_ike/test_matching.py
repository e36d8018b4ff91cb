"""Which connection the responder picks (the 002 page's mechanism), without sockets."""
from __future__ import annotations

from ipsec_hil_twin.ike import conf
from ipsec_hil_twin.ike.daemon import Daemon

LAB = """connections {
  lab {
    local_addrs = 192.0.2.2
    remote_addrs = 192.0.2.1
    local {
      auth = psk
    }
    remote {
      auth = psk
%s
    }
  }
  many {
    local_addrs = 192.0.2.2
    remote_addrs = 192.0.2.1
    local {
      auth = psk
      id = %s
    }
    remote {
      auth = psk
      id = %s
    }
  }
}
"""


def picked(tmp_path, lab_remote_id: str, many_ids: tuple[str, str], idi: str, idr: str | None) -> str | None:
    d = Daemon(tmp_path)
    d.config.conns = conf.loads(LAB % (lab_remote_id, *many_ids)).connections
    c = d.config.pick_conn("192.0.2.2", "192.0.2.1", idi, idr)
    return c.name if c else None


def test_same_identities_first_loaded_wins(tmp_path):
    ids = ("192.0.2.2", "192.0.2.1")
    assert picked(tmp_path, "      id = 192.0.2.1", ids, "192.0.2.1", "192.0.2.2") == "lab"


def test_own_identities_pick_their_connection(tmp_path):
    ids = ("many-b@lab", "many-a@lab")
    assert picked(tmp_path, "      id = 192.0.2.1", ids, "many-a@lab", "many-b@lab") == "many"
    # a perfect identity match beats the lab connection's %any remote id
    assert picked(tmp_path, "", ids, "many-a@lab", None) == "many"
    assert picked(tmp_path, "", ids, "192.0.2.1", None) == "lab"


def test_unknown_identity_matches_nothing(tmp_path):
    ids = ("many-b@lab", "many-a@lab")
    assert picked(tmp_path, "      id = 192.0.2.1", ids, "stranger@x", None) is None
    assert picked(tmp_path, "      id = 192.0.2.1", ids, "192.0.2.1", "someone-else") is None
