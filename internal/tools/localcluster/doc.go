// Package localcluster runs a whole Legation deployment on one machine, as
// in production but on loopback addresses: a real etcd cluster (one etcd
// process per member), xds-node replicas on it, and HAProxy in front of
// them as the plain L4 load balancer, each on an address of its own under
// a 127.0.N. prefix. People run it through deploy/local (`go run
// ./deploy/local up`); tests through StartTest.
//
// It owns those processes as its children (os/exec): it knows a process
// has ended because cmd.Wait returned, not from pid files or /proc. On
// Linux each child gets SIGKILL when the process that started it dies
// (Pdeathsig), so nothing outlives the owner, even one killed with
// SIGKILL; each child is also in a process group of its own, so that a
// terminal's Ctrl-C reaches the owner only, which then stops the children
// in order. Elsewhere on Unix children that outlive a crashed owner are
// stopped by hand.
//
// It owns: the processes' command lines (etcd flags, xds-node flags,
// HAProxy's generated config), their state directory (logs, etcd data,
// haproxy.cfg, HAProxy's admin socket, the sourceable env file listing
// every address), starting, stopping (SIGTERM, then SIGKILL after a
// grace period), killing (SIGKILL), freezing (SIGSTOP) and thawing
// (SIGCONT) any of them, adding a replica (with a graceful HAProxy
// reload) and removing one, compacting etcd, the fault proxies a chaos
// run switches (faults.go: each replica's proxies to etcd and its gossip
// proxy, Config.EtcdProxies and GossipProxies; the proxies themselves are
// internal/tools/faultnet's), waits on what the cluster reports (health, readiness, the
// ring, a view's revision, HAProxy's view of a replica), building the
// etcd and xds-node binaries, and the control endpoint through which
// deploy/local drives a cluster that another process owns. With
// Config.Secure it also owns the cluster's security (security.go): a
// test CA and every certificate, the gossip key, etcd's least-privilege
// roles and users, and the authorization rules it starts with.
//
// It does not own: the replicas' behaviour (internal/replica), xDS clients or
// Envoy (tests bring their own), writing resources (xdsadmin), or
// installing HAProxy (`make setup`).
package localcluster
