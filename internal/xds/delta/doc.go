// Package delta serves incremental (delta) xDS from a view.View: the
// DeltaAggregatedResources method of ADS, the Delta* methods of the
// per-type services, and VHDS (on-demand virtual hosts). One change sends
// one resource. State-of-the-world xDS is package sotw's.
//
// A resource's version is the decimal etcd mod_revision of its key and a
// response's system_version_info is the view's revision, so every replica
// sends the same versions. Clients' initial_resource_versions are honoured:
// what a client already holds at the current version is not resent.
//
// The package holds only delta's rules: what a request means (subscribe,
// unsubscribe, wildcards, initial_resource_versions, ACK and NACK of the
// one outstanding response per type), what each client holds (the
// version and source of each resource, in an xdsstream.Holding), and what a
// flush sends (changed resources and removed_resources, make before break,
// TTLs and heartbeats). What every stream does whatever its protocol is
// package xdsstream's; registering the gRPC services is package grpcapi's.
// Scope resolution comes from package scope.
//
// Promises cited by number are those of docs/concepts/design.md.
package delta
