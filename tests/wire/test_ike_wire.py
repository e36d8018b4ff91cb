"""What the IKE side hands the engine for the wire tests: the child's own replay window
from swanctl.conf and ESN from `...-esn` proposals (no root)."""
from __future__ import annotations

from ipsec_hil_twin.ike import conf
from ipsec_hil_twin.ike.proposals import parse_proposals, select

#: only what these tests read: a connection's children (the grammar and a whole connection's
#: model are tests/twin_ike/test_conf.py's)
TEXT = """\
connections {
    lab {
        children {
            wide {
                esp_proposals = aes256gcm16-esn
                replay_window = %s
            }
            plain { esp_proposals = aes256-sha256 }
        }
    }
}
"""


def test_child_replay_window_and_esn_parsed():
    cfg = conf.loads(TEXT % "1024")
    assert not cfg.errors
    kids = cfg.connections[0].children
    assert kids["wide"].replay_window == 1024 and kids["plain"].replay_window is None
    assert [c.esn for c in kids["wide"].esp_proposals] == ["EXT_SEQ"]
    assert kids["wide"].esp_proposals[0].listing() == "AES_GCM_16-256/ESN"


def test_bad_replay_window_names_file_and_line():
    cfg = conf.loads(TEXT % "lots", file="swanctl.conf")
    assert [(e.why, e.where) for e in cfg.errors] == [("invalid value for: replay_window", "swanctl.conf:6")]


def test_esn_is_negotiated_as_its_own_transform():
    esn, noesn = parse_proposals("ESP", "aes256gcm16-esn"), parse_proposals("ESP", "aes256gcm16")
    assert select(esn, noesn) is None and select(noesn, esn) is None
    both = parse_proposals("ESP", "aes256gcm16-esn-noesn")
    assert select(both, esn).esn == "EXT_SEQ" and select(both, noesn).esn == "NO_EXT_SEQ"
