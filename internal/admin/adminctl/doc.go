// Package adminctl is the xdsadmin command line: its cobra commands
// (apply, get, delete, diff, watch, ttl, status, members, load, authz,
// export, etcd-auth, cert issue, version), their flags and environment variables, the connection to
// etcd, the probes of the replicas' HTTP port (members asks /readyz, over
// HTTP or HTTPS), and the table, YAML and JSON output.
//
// It owns no resource logic of its own: decoding and validating documents
// is package resource's job, reading and writing etcd (plans, transactions,
// limits, diffs, watches) is package store's, and the authorization rules
// (their validation, key layout and reads and writes) are package authz's.
// cmd/xdsadmin only wires Run to the process: signals, standard streams and
// the exit code.
//
// Every command validates its input before it touches etcd, prints its
// error once (as "xdsadmin: <message>" on standard error) and makes Run
// return a non-zero exit code on any error.
package adminctl
