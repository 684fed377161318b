// Package xdsstream is the stream core of Legation's xDS servers: what
// every xDS stream does whatever its protocol. Package sotw (state of the
// world) and package delta (incremental) build on it and keep only their
// protocol's rules: what a request means and what a flush sends.
//
// It owns, per stream: the one receive goroutine and the one loop that
// owns the stream's state and is its only sender (Serve); the node, taken
// from the stream's first request, and its group; the move to newer view
// snapshots, telling the protocol of each change the node can see; nonces;
// encoding a response once, shared by every stream that sends the same
// (through wire.Cache), and sending it; the record of what was sent,
// ACKed and NACKed per type; what the client holds of each type, a base
// set shared with the streams sent the same responses plus the stream's
// own changes (Holding, shared through a server's HeldSets); the TTL'd resources a client holds and their
// heartbeats (promise 8); the status a stream reports (/debug/streams, and
// the protocol-neutral Summary node status records are made of). Per
// server: the Config both protocols take, the common metrics
// (legation_sotw_* and legation_delta_*) and the histograms all protocols
// share (legation_xds_*: commit-to-ACK convergence, push time, response
// size), the replica's name put in every response's control_plane, catching up with a version a
// client presents (promise 3), and the registry of open streams.
//
// It knows nothing of subscriptions, wildcards or what a response carries.
// Promises cited by number are those of docs/concepts/design.md.
package xdsstream
