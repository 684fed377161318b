// Package ads serves state-of-the-world xDS from a store.View: the
// Aggregated Discovery Service (StreamAggregatedResources), the per-type
// SotW services (CDS, EDS, LDS, RDS, SRDS, SDS, RTDS, ECDS) with their
// unary Fetch methods, and REST-JSON polling over HTTP.
//
// Versions are global: a response's version_info is the decimal etcd
// revision of the view snapshot it was built from, so every replica at the
// same revision sends the same thing. Resource bytes come from etcd and are
// never re-marshaled; a response body is encoded once per (type, version,
// resource set) and shared by every stream that sends it.
//
// The package owns per-stream protocol state (subscriptions, nonces,
// ACK/NACK, what each client holds). It does not own the view, the gRPC
// server or membership; delta xDS lives in package delta.
package ads
