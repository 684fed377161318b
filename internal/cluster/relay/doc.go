// Package relay sends each xDS stream to its node's home replica (promise
// 9, node affinity). Its gRPC stream interceptor reads a stream's first
// request to learn the node id, asks Config.Home which replica is home,
// and either serves the stream locally (the handler sees the first request
// replayed) or relays it, message by message and undecoded, over a gRPC
// client stream to the home. A relayed stream carries the metadata marker
// x-legation-relayed, so the home serves it whatever its own view of the
// ring says: a stream is relayed at most once. The marker is trusted only
// when Config.TrustMarker says its peer is a replica (with mTLS, one
// presenting a replica identity; in plaintext, one at the address of a
// replica registered in etcd); what Config.Forward returns (the
// client's identity) goes with each relayed stream. If the home cannot be
// reached the stream is served locally (see Relay.StreamInterceptor for
// exactly when).
//
// The package also keeps the registry of the streams its interceptor has
// seen, local or relayed, and Rebalance closes, at a bounded and jittered
// rate, those whose home moved after a membership change, so that their
// clients reconnect to the new home. Drain closes them all, spread over a
// period, when the replica shuts down, and refuses new ones from then on.
//
// It does not own the hash ring or membership (Home and Rebalance's home
// func come from the caller), the gRPC server, or any xDS protocol state:
// it never looks past a stream's first request.
//
// Promises cited by number are those of docs/concepts/design.md.
package relay
