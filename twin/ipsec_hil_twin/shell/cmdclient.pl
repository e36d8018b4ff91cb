# The DIR/bin wrappers' client of an appliance's command server (ipsec_hil_twin.shell.cmdserver), in Perl.
#
#   PERL_BADLANG=0 perl twin/ipsec_hil_twin/shell/cmdclient.pl SOCKET MODULE [ARG...]
#
# Why Perl and not Python (issue 15): every emulated FreeBSD command of every SSH request
# went through a client, and a Python client cost 21 ms before it sent a byte (a bare
# `python -I -S` 12 ms, its imports 9 ms) -- a third to a half of a lab command's whole
# cost. perl-base is part of every Debian system and starts in 2 ms; this file loads no
# module at all (even `use Socket` costs 8 ms), so the two Linux constants it needs are
# written out below.
#
# What it does is what exec would have passed on, as ipsec_hil_twin.shell.cmdclient (the protocol's one
# home) describes: one request naming MODULE, the arguments and the environment, sent
# with the PEER flag -- the server takes this process's stdin, stdout and stderr itself
# (pidfd_getfd on the peer of the connection) and its working directory (/proc/PID/cwd),
# because Perl without modules cannot send descriptors. It then waits for the command's
# status and exits with it; a command killed by a signal kills this client with that
# signal, so the shell sees the same death. If this client dies (its SSH session was cut
# and the shell's process group killed), the server sees the connection close and kills
# the command.
#
# The DIR/bin wrappers are Perl scripts that run this file in their own interpreter (`do`,
# with @ARGV set as above: ipsec_hil_twin.fbsd.install). PERL_BADLANG, should a caller have set it
# (the wrappers were sh scripts that did, against a missing locale's warning), is not
# passed on to the command.
use strict;

my ($sock_path, $module, @args) = @ARGV;
sub fail { syswrite(STDERR, "twin: command server $sock_path: $_[0]\n"); exit 126 }

if (!defined $module) { syswrite(STDERR, "usage: cmdclient.pl SOCKET MODULE [ARG...]\n"); exit 2 }
my ($AF_UNIX, $SOCK_STREAM) = (1, 1);  # <sys/socket.h> on Linux
my $peer_flag = 0x08;                   # ipsec_hil_twin.shell.cmdclient.PEER_FDS
length($sock_path) < 108 or fail("socket path longer than sun_path");
socket(my $s, $AF_UNIX, $SOCK_STREAM, 0) or fail("socket: $!");
connect($s, pack("S a108", $AF_UNIX, $sock_path))
    or fail("not answering ($!); the command did not run");

delete $ENV{PERL_BADLANG};
my @fields = ("run", $module, "", scalar(@args), @args, map { "$_=$ENV{$_}" } sort keys %ENV);
for (@fields) { fail("an argument or environment entry holds a NUL byte") if index($_, "\0") >= 0 }
my $payload = join("\0", @fields);
my $out = "TWC1" . pack("N", length $payload) . chr($peer_flag) . $payload;
while (length $out) {
    my $n = syswrite($s, $out);
    fail("connection lost ($!)") unless defined $n;
    substr($out, 0, $n) = "";
}

my $reply = "";
while ($reply !~ /\n/) {
    my $n = sysread($s, $reply, 4096, length $reply);
    fail("connection lost ($!)") unless defined $n;
    last if $n == 0;
}
if ($reply =~ /^exit (\d+)\n/) { exit($1 & 0xFF) }
if ($reply =~ /^signal (\d+)\n/) {
    $SIG{$_} = 'DEFAULT' for keys %SIG;
    kill($1, $$);
    exit(128 + $1);  # a signal that does not kill (SIGCHLD...): the shell's number
}
if ($reply =~ /^error (.*)\n/) { fail($1) }
fail("closed the connection without the command's status (answer \"" . substr($reply, 0, 60) . "\")");
