// Package faults plans and injects the faults of a chaos run: Schedule
// turns a seed into a list of faults (which, on what, when, for how long)
// that keeps etcd's quorum and a replica untouched at every moment, and an
// Executor applies such a list to a localcluster.Cluster, through its
// processes (SIGKILL, SIGSTOP, SIGTERM) and its fault proxies
// (internal/tools/faultnet), healing each fault after its duration.
//
// It does not own the cluster (internal/tools/localcluster), the clients and
// what they record, or the checking of a run (internal/tools/chaos).
package faults
