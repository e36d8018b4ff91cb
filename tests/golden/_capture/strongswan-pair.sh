#!/bin/sh
# Re-capture the real strongSwan 5.9.8 golden samples (swanctl_*/real-libipsec-*).
# Two charon-systemd daemons, each in its own network namespace AND private mount namespace
# (a tmpfs on /run, so the vici socket and pid file never meet another charon), joined by
# a veth; ESP runs in user space (kernel-libipsec, UDP-encapsulated: encap = yes) because
# this machine has no kernel ESP. Needs root. Output: /tmp/h3c/a/out/<name>.{txt,stderr,status}.
# Configs: conf/{a,b}/ here, copied to /tmp/h3c/<side>/ (the PSK is a fixture, not a secret).
# Names use a random h3c<hex> prefix; the namespaces are removed at the end.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
C=${CAPTURE_DIR:-/tmp/h3c}
export CAPTURE_DIR=$C
for s in a b; do
  mkdir -p $C/$s/swanctl
  cp "$here/conf/$s/strongswan.conf" $C/$s/strongswan.conf
  cp "$here/conf/$s/swanctl.conf" $C/$s/swanctl/swanctl.conf
  rm -rf $C/$s/out $C/$s/charon.pid
done
P=h3c$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
cleanup() {
  set +e
  for s in a b; do [ -f $C/$s/charon.pid ] && kill "$(cat $C/$s/charon.pid)" 2>/dev/null || true; done
  ip netns del $P-a 2>/dev/null; ip netns del $P-b 2>/dev/null; true
}
trap cleanup EXIT
ip netns add $P-a; ip netns add $P-b
ip link add ${P}a netns $P-a type veth peer name ${P}b netns $P-b
for s in a b; do ip -n $P-$s link set lo up; ip -n $P-$s link set ${P}$s up; done
ip -n $P-a addr add 192.0.2.1/24 dev ${P}a; ip -n $P-b addr add 192.0.2.2/24 dev ${P}b
ip -n $P-a addr add 10.1.0.1/32 dev lo;     ip -n $P-b addr add 10.2.0.1/32 dev lo
rm -f $C/a.done
(timeout 150 ip netns exec $P-b unshare -m --propagation private sh "$here/strongswan-inner.sh" b &)
sleep 1
timeout 140 ip netns exec $P-a unshare -m --propagation private sh "$here/strongswan-inner.sh" a
sleep 3
