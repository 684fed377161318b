// Package sotw serves state-of-the-world (SotW) xDS from a view.View: the
// Aggregated Discovery Service (StreamAggregatedResources), the per-type
// SotW services (CDS, EDS, LDS, RDS, SRDS, SDS, RTDS, ECDS) with their
// unary Fetch methods, and REST-JSON polling over HTTP. Delta
// (incremental) xDS is package delta's.
//
// Versions are global: a response's version_info is the decimal etcd
// revision of the view snapshot it was built from, so every replica at the
// same revision sends the same thing. Resource bytes come from etcd and are
// never re-marshaled; a response body is encoded once per (type, version,
// resource set) and shared by every stream that sends it.
//
// The package holds only SotW's rules: what a request means (subscriptions,
// wildcards, the latest request per type, stale nonces, ACK and NACK),
// what each client holds (the entries it was sent, in an
// xdsstream.Holding), and what a flush sends (full state for LDS/CDS,
// changed resources for EDS/RDS, make before break, TTL wrapping and
// heartbeats). What every stream does whatever its protocol is package
// xdsstream's; registering the gRPC services is package grpcapi's. It does
// not own the view, the gRPC server or membership.
//
// Promises cited by number are those of docs/concepts/design.md.
package sotw
