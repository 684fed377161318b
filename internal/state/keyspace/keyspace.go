package keyspace

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the etcd key prefix when none is configured.
const DefaultPrefix = "/legation/"

// A Dir is a directory under the prefix: its name, ending in '/'.
type Dir string

// The directories under the prefix. Layout says what each holds.
const (
	// Resources holds the configuration: the only directory a replica's
	// view watches.
	Resources Dir = "resources/"
	// Applies holds one apply marker per scope, which every write of the
	// store to the scope's resources puts in the same transaction.
	Applies Dir = "applies/"
	// History holds the record of each transaction of an apply: what it
	// changed, and the bodies from before, to undo it.
	History Dir = "history/"
	// Rollouts holds the canary rollouts, running and ended.
	Rollouts Dir = "rollouts/"
	// Locks holds the scopes' apply locks and who holds them.
	Locks Dir = "locks/"
	// Leases holds the refresh markers of the leases of TTL'd resources.
	Leases Dir = "leases/"
	// Status holds the status records of the connected nodes.
	Status Dir = "status/"
	// Members holds the registry of the replicas.
	Members Dir = "members/"
	// Elections holds the replicas' leader elections: who runs the
	// rollout controller.
	Elections Dir = "elections/"
	// Load holds the replicas' load report windows (LRS).
	Load Dir = "load/"
	// Authz holds the client authorization rules.
	Authz Dir = "authz/"
)

// Prefix returns d under prefix: "<prefix><dir>/".
func (d Dir) Prefix(prefix string) string { return prefix + string(d) }

// Key returns the key named rest in d under prefix: "<prefix><dir>/<rest>".
func (d Dir) Key(prefix, rest string) string { return prefix + string(d) + rest }

// Cut returns what follows d's prefix in key; ok is false when key is not
// under d.
func (d Dir) Cut(prefix, key string) (rest string, ok bool) {
	return strings.CutPrefix(key, d.Prefix(prefix))
}

// The subdirectories of Locks.
const (
	lockApply   = "apply/"
	lockHolders = "holders/"
)

// ApplyLock returns the etcd key prefix of scope's apply lock:
// "<prefix>locks/apply/<scope>" (etcd's concurrency.Mutex keys are under
// it, after a '/').
func ApplyLock(prefix, scope string) string { return Locks.Key(prefix, lockApply+scope) }

// LockHolder returns the key naming who holds, or waits for, the apply
// lock of the session whose lease is lease:
// "<prefix>locks/holders/<lease, 16 hex digits>".
func LockHolder(prefix string, lease int64) string {
	return Locks.Key(prefix, lockHolders+leaseID(lease))
}

// LeaseMarker returns the key of lease's refresh marker:
// "<prefix>leases/<lease, 16 hex digits>".
func LeaseMarker(prefix string, lease int64) string { return Leases.Key(prefix, leaseID(lease)) }

// leaseID is an etcd lease id as keys spell it: 16 hex digits.
func leaseID(lease int64) string { return fmt.Sprintf("%016x", lease) }

// RolloutElection is the election of the replica that runs the rollout
// controller: etcd's concurrency.Election keys are under it.
func RolloutElection(prefix string) string { return Elections.Key(prefix, "rollouts") }
