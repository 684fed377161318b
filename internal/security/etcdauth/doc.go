// Package etcdauth sets up etcd's authentication for Legation, as
// docs/operations/etcd.md describes it: the roles legation-replica (read
// the prefix, write only status records, the membership registry and load
// windows) and legation-admin (read and write the prefix), a user per
// client certificate CN holding one of them, the root user, and auth
// enabled. Setup is idempotent: run again (a Helm hook Job runs it at each
// install and upgrade) it adds only what is missing.
//
// It owns the roles' grants (Grants), derived from the writers of the key
// layout (package keyspace), and their setup through clientv3's Auth API.
// It does not own the etcd client (the caller's, connected as root or to
// an etcd whose auth is not on yet), certificates, or users with
// passwords.
package etcdauth
