// Package limits guards the gRPC server against clients that would take
// more than their share: it recovers handler panics (one caller gets
// INTERNAL, the replica lives), bounds the streams one transport
// connection may hold open, and admits new streams at a rate and up to a
// cap. It owns the counters every bound reports on
// (legation_limits_hits_total{limit=...}, legation_panics_total), which
// other packages reuse by name through Hits and Panics.
//
// It owns Bound, the value of a bound in a config (the stream core's, the
// relay's, LRS's): a max, or no bound, each said by name, so that neither
// zero nor a sign carries a meaning of its own.
//
// It does not enforce the bounds inside a stream (names per subscription,
// send timeouts: package xdsstream) nor the HTTP server's (package
// replica).
package limits
