// Package view is the read side of Legation's state in etcd: the View
// that a replica serves from, which loads every resource under
// keyspace.Resources at one etcd revision and follows one watch from
// there, publishing an immutable Snapshot per change (promise 1 of
// docs/concepts/design.md: exactly etcd's resources at one revision, applied in
// whole revisions), and the Interests through which readers are woken
// only by the changes they can see.
//
// It owns the in-memory copy of the resources, its history of recent
// changes and deletions, its recovery from compactions, lost watches and
// etcd restores, and its metrics (legation_view_*). It does not write to
// etcd, and knows nothing of xDS or of the transports its readers use:
// an Interest's batching key is any value the reader chooses. The key and
// value encoding it decodes with are package store's.
package view
