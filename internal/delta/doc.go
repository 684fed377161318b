// Package delta serves incremental (delta) xDS from a store.View: the
// DeltaAggregatedResources method of ADS and the Delta* methods of the
// per-type services. One change sends one resource.
//
// A resource's version is the decimal etcd mod_revision of its key and a
// response's system_version_info is the view's revision, so every replica
// sends the same versions. Clients' initial_resource_versions are honoured:
// what a client already holds at the current version is not resent.
//
// The package owns per-stream delta state (subscriptions, what each client
// holds, nonces, ACK/NACK). Scope resolution comes from package scope and
// shared encoding from package wire; SotW lives in package ads.
package delta
