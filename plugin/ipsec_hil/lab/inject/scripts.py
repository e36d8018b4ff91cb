"""The stdlib-only programs the injection runs on lab hosts, as text.

Why stdlib only: the sender runs on the peer appliance (OPNsense's python3, no scapy) and
the receiver on the bench; both are written to /tmp there for one run.  Neither carries a
key: the sender reads ready-made ESP frames from stdin (2-byte length, frame), the
receiver only counts tags.

SENDER argv: DST [SRC] [PPS] [BPS] -- one raw IPPROTO_ESP socket (the kernel adds the outer
header), frames read from stdin as they arrive (the first leaves while a jumbo sweep's
40 MB are still being sent), paced to PPS and BPS bits/s (0: no byte limit; the ports'
queues are not the subject: a jumbo sweep at 4,000 frames/s overruns a 100 Mbit/s port);
a schedule more than 20 ms behind (a stall) starts again from now, never a burst; DF set
where the OS allows it so a frame over the path MTU fails instead of fragmenting.
A full local interface queue (ENOBUFS, EAGAIN) is this host's, not the path's: the frame
is sent again after a backoff (1 ms doubling, about half a second in all), counted in
"queue_full"; only a frame that still cannot go counts as failed.
Prints {"sent": n, "failed": n, "errors": {errno: n}, "queue_full": n, "seconds": s, "cut": 0|1}
("cut": stdin ended inside a frame).

UDP_SENDER argv: DST PORT SRC TOKEN_HEX FIRST LAST PPS BPS -- the outbound sweep: one UDP
socket bound to SRC (the appliance's own LAN address, or the bench's behind it), one
datagram per inner size FIRST..LAST (IP + UDP + payload; the payload tagged MAGIC + token
+ index, index 0 for FIRST) built here, so nothing but the arguments travels; then END.
DF as SENDER's; the same pacing, backoff and printed summary.

RECEIVER argv: FAMILY ADDR PORT TOKEN_HEX READY_PATH CAP_SECONDS OUT_PATH -- one UDP socket;
counts datagrams whose payload starts with MAGIC + TOKEN by index and records each index's
payload length; stops GRACE seconds after the END tag arrived, or after CAP_SECONDS. GRACE
(0.1 s) is for a frame that left before END and arrives after it: one association's
frames keep their order through an engine (one queue; the virtual lab's one process per
direction), so anything sent before END -- a duplicate a broken window lets through
included -- is already in the socket when END is read; the grace covers the bench's own
scheduling, not a path that reorders by whole tenths of a second.
Writes {"counts": {index: n}, "lengths": {index: payload bytes}, "end": bool, "other": n}
to OUT_PATH at once (a temporary file renamed over it): the caller polls for the file, and
a jumbo sweep's answer is tens of kilobytes -- printed through a redirect it appeared in
8 KiB blocks and a poll once read the first three of them (a JSON cut at byte 24,576).
"""
from __future__ import annotations

#: the sending socket's DF option, where the OS allows it: a datagram over the route's MTU
#: fails (EMSGSIZE, counted) instead of leaving in fragments
_DONT_FRAGMENT = r'''
if fam == socket.AF_INET:  # Linux IP_MTU_DISCOVER = IP_PMTUDISC_DO; FreeBSD IP_DONTFRAG
    s.setsockopt(socket.IPPROTO_IP, *((10, 2) if sys.platform.startswith("linux") else (67, 1)))
else:
    s.setsockopt(socket.IPPROTO_IPV6, 62, 1)  # IPV6_DONTFRAG on both
if sys.platform.startswith("linux"):
    # IP_RECVERR / IPV6_RECVERR: Linux reports a datagram its own qdisc dropped (ENOBUFS) only
    # with it, so the backoff below resends it; without it the drop passed for a send and a
    # late shaper timer lost a run of consecutive sizes (issue 52). FreeBSD reports it anyway.
    s.setsockopt(*((socket.IPPROTO_IP, 11) if fam == socket.AF_INET else (socket.IPPROTO_IPV6, 25)), 1)
'''

#: the paced send loop both senders end with: `frames()` yields the datagrams, `hdr` is what
#: the kernel adds to each (for the byte pacing), `s`/`addr`/`pps`/`bps` are set
_PACED = r'''
sent = failed = nbytes = queue_full = 0
errs = {}
# how late the sender may fall before it starts its pacing again from now instead of
# catching up: at most 16 KiB of the path's rate (and 8 frames, 20 ms), so a catch-up
# is never a burst the port's queue must hold -- 20 ms at half of 100 Mbit/s was 125 KB,
# the whole 128 KiB queue the port states (issue 52)
catch_up = min(0.02, 8 / pps, 16384 * 8 / bps if bps else 0.02)
t0 = start = time.monotonic()
for frame in frames():
    due = t0 + max(sent / pps, nbytes * 8 / bps if bps else 0.0)
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    elif now - due > catch_up:
        # a stall (the next frame still on its way, a busy machine): start the pacing again
        # from now instead of catching up in a burst the ports would have to queue
        t0 += now - due
    backoff = 0.001
    again = True
    while True:
        try:
            s.sendto(frame, addr)
            sent += 1
            nbytes += len(frame) + hdr
            break
        except OSError as e:
            # ENOBUFS/EAGAIN: this host's own interface queue is full -- not the path under
            # test; wait for it to drain and send the same frame again (as iperf3 does)
            if e.errno in (errno.ENOBUFS, errno.EAGAIN) and backoff <= 0.256:
                queue_full += 1
                time.sleep(backoff)
                backoff *= 2
                continue
            if again and e.errno not in (errno.ENOBUFS, errno.EAGAIN, errno.EMSGSIZE):
                again = False  # an ICMP error about an earlier datagram (IP_RECVERR): this one was not sent
                continue
            failed += 1
            name = errno.errorcode.get(e.errno, str(e.errno))
            errs[name] = errs.get(name, 0) + 1
            break
print(json.dumps({"sent": sent, "failed": failed, "errors": errs, "queue_full": queue_full,
                  "seconds": round(time.monotonic() - start, 3), "cut": cut}))
'''

SENDER = r'''
import errno, json, socket, struct, sys, time
dst = sys.argv[1]
src = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
pps = float(sys.argv[3]) if len(sys.argv) > 3 else 4000.0
bps = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.socket(fam, socket.SOCK_RAW, 50)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
''' + _DONT_FRAGMENT + r'''
if src:
    s.bind((src, 0))
inp = sys.stdin.buffer
addr = (dst, 0, 0, 0) if fam == socket.AF_INET6 else (dst, 0)
hdr = 40
cut = 0


def frames():
    """Frames as they arrive on stdin: the first leaves while the rest are still on their way."""
    global cut
    while True:
        head = inp.read(2)
        if not head:
            return
        if len(head) < 2:
            cut = 1  # the stream ended inside a frame's length
            return
        (n,) = struct.unpack("!H", head)
        frame = inp.read(n)
        if len(frame) < n:
            cut = 1  # the stream ended inside a frame
            return
        yield frame
''' + _PACED

UDP_SENDER = r'''
import errno, json, socket, struct, sys, time
dst, port, src, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], bytes.fromhex(sys.argv[4])
first, last, pps, bps = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
hdr = (40 if fam == socket.AF_INET6 else 20) + 8
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
''' + _DONT_FRAGMENT + r'''
s.bind((src, port))
addr = (dst, port, 0, 0) if fam == socket.AF_INET6 else (dst, port)
MAGIC, END = b"HILW", 0xFFFFFFFF
cut = 0


def frames():
    for i, size in enumerate(range(first, last + 1)):
        yield MAGIC + token + struct.pack("!I", i) + bytes(size - hdr - 12)
    yield MAGIC + token + struct.pack("!I", END)
''' + _PACED

RECEIVER = r'''
import json, os, select, socket, struct, sys, time
fam = socket.AF_INET6 if sys.argv[1] == "ipv6" else socket.AF_INET
addr, port, token, ready, cap = sys.argv[2], int(sys.argv[3]), bytes.fromhex(sys.argv[4]), sys.argv[5], float(sys.argv[6])
out = sys.argv[7]
MAGIC, END, GRACE = b"HILW", 0xFFFFFFFF, 0.1
s = socket.socket(fam, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((addr, port))
open(ready, "w").close()
counts, lengths, other, end_at = {}, {}, 0, None
stop = time.monotonic() + cap
while True:
    now = time.monotonic()
    limit = min(stop, end_at + GRACE) if end_at is not None else stop
    if now >= limit:
        break
    if not select.select([s], [], [], limit - now)[0]:
        continue
    data = s.recv(65535)
    if data[:8] != MAGIC + token:
        other += 1
        continue
    (i,) = struct.unpack_from("!I", data, 8)
    if i == END:
        end_at = time.monotonic()
        continue
    counts[i] = counts.get(i, 0) + 1
    lengths[i] = len(data)
with open(out + ".tmp", "w") as f:
    f.write(json.dumps({"counts": counts, "lengths": lengths, "end": end_at is not None, "other": other}))
os.replace(out + ".tmp", out)
'''
