#!/bin/sh
SIDE=$1
C=${CAPTURE_DIR:-/tmp/h3c}
D=$C/$SIDE
mkdir -p $D/out; cd $D/out
mount -t tmpfs tmpfs /run
export STRONGSWAN_CONF=$D/strongswan.conf
/usr/sbin/charon-systemd > $D/charon.log 2>&1 &
echo $! > $D/charon.pid
i=0; while [ ! -S /run/charon.vici ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done
cap() { name=$1; shift; "$@" > $name.txt 2> $name.stderr; echo $? > $name.status; }
cap load swanctl --load-all --noprompt --file $D/swanctl/swanctl.conf
if [ $SIDE = a ]; then
  sleep 3
  cap init-ok swanctl --initiate --child net
  cap ping ping -c 5 -i 0.2 -W 1 -I 10.1.0.1 10.2.0.1
  cap list swanctl --list-sas
  cap list-raw swanctl --list-sas --raw
  cap list-pretty swanctl --list-sas --pretty
  cap init-badts swanctl --initiate --child badts
  cap init-badprop swanctl --initiate --child badprop
  cap init-nosuch swanctl --initiate --child nosuch
  cap init-lost swanctl --initiate --child lost
  cap init-lost-timeout swanctl --initiate --child lost --timeout 1
  cap list-after swanctl --list-sas
  cap list-after-raw swanctl --list-sas --raw
  cap load-again swanctl --load-all --noprompt --file $D/swanctl/swanctl.conf
  touch $C/a.done
else
  i=0; while [ ! -e $C/a.done ] && [ $i -lt 120 ]; do sleep 0.5; i=$((i+1)); done
fi
kill $(cat $D/charon.pid); sleep 1
