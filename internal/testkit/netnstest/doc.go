// Package netnstest gives a test a client that is not on loopback: a
// network namespace of the test's own, joined to the root namespace by a
// veth pair with a private /30 (10.251.0.0/16), from which the test dials
// servers listening on the root end's address.
//
// Why: Legation's tests send traffic only to loopback or to network
// namespaces they made themselves, never to the host's real networks. Some
// rules can only be shown with a remote client, one whose address is not
// loopback (a plaintext client far away asking for a secret is refused; a
// /debug/ page answers loopback clients only). A namespace made here is
// such a client, and its traffic never leaves the machine: the namespace
// has its loopback and its end of the veth pair, no route anywhere else.
//
// What it owns: making the namespace and the veth pair with the ip command
// (iproute2), dialing from inside the namespace (DialContext, and the HTTP
// client and gRPC dialer built on it), and removing both in tb.Cleanup. It
// does not start servers: a test listens on HostIP in the root namespace as
// it would on 127.0.0.1.
//
// It needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN (ip netns add mounts
// under /run/netns; setns needs both), and the ip command; `make test` runs
// as root and `make setup` installs Debian's iproute2 when ip is missing.
// It does not skip: without them New fails the test, saying which command
// failed and what it printed.
//
// It is a normal package so that the tests of several packages can share
// it, but only tests import it; nothing in the product does.
package netnstest
