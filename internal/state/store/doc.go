// Package store is the write side of Legation's state in etcd, and the
// reads that tools make of it: the resource key ("type/scope/name" under
// keyspace.Resources) and its value envelope, plans and atomic applies
// (one etcd transaction per apply, optionally under one lease), the
// scopes' apply markers and apply locks, lease refreshes, reads now or at
// a past revision, diffs and watches for xdsadmin, and the paginated read
// of a directory at one revision that every reader uses.
//
// <type> is a short type name (resource.Type.Name), <scope> is "default"
// or a node group and never holds '/', and <name> is the resource name,
// which may. The directories under the prefix are package keyspace's. The
// package does not serve xDS and keeps nothing in memory: the replicas'
// in-memory copy of the resources, followed by one watch, is package
// view's.
//
// The promises its comments cite by number (promise 1, etcd is the truth;
// promise 5, atomic applies) are those of docs/concepts/design.md.
package store
