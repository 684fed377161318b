// Package etcdconn turns the etcd connection flags that xds-node and
// xdsadmin share into a clientv3.Config: the endpoints (host:port,
// http://host:port or https://host:port), TLS (--etcd-cacert, --etcd-cert,
// --etcd-key) and etcd's username and password authentication
// (--etcd-username, the password from LEGATION_ETCD_PASSWORD or
// --etcd-password-file; --etcd-password is refused, since the process list
// shows the command line, and so is a password over plain text).
//
// It owns: checking those flags against each other (Validate, no I/O),
// checking the certificate files at start (Options.ClientConfig: each error
// names the flag, the file and the problem), the TLS client config, and
// picking up a rotated client certificate and key for new connections to
// etcd (the files are read again when they change; the CA file is read
// once). It keeps the password out of every string it makes: errors,
// String, LogValue, and the flags' usage and defaults.
//
// It does not own: the etcd client's lifetime (the caller creates and
// closes it), timeouts, keepalives and message sizes (the caller sets them
// on the returned config), or etcd's roles and users (docs/operations/etcd.md).
package etcdconn
