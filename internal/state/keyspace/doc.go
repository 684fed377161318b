// Package keyspace owns Legation's etcd key layout: every directory under
// the configured prefix (DefaultPrefix unless one is given), the keys each
// holds, what their values are, who writes them and who reads them. Every
// other package asks it for its prefixes and keys instead of spelling a
// directory's name. The key layout table of
// docs/reference/etcd-key-layout.md is generated from Layout (`make docs`)
// and checked against it by this package's tests.
//
// Each directory has one kind of writer (Dir.Writer): the replicas, or the
// operator's tools. etcd's least-privilege roles (package etcdauth) are
// derived from it, so a directory added here for the replicas to write is
// granted to them with no other change.
//
// It does no I/O and imports nothing of Legation's: the value types it
// names are described as text, and the packages that encode them own them.
package keyspace
