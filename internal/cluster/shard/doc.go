// Package shard owns the xds-node cluster: who the replicas are and which of
// them is the home of an Envoy node id.
//
// Membership has two sources that play different parts:
//
//   - an etcd registry, <prefix>members/<name> -> Member as JSON, each key
//     under a lease of the replica kept alive while it runs. It is how
//     replicas find each other without --join, what `xdsadmin members`
//     reads, and the authority on who is a replica: each replica follows
//     it with a watch (registered.go), and a member is on the ring only
//     if it is registered there with the addresses it gossips. A replica
//     whose lease is lost is off its peers' rings until it registers
//     again.
//   - memberlist (SWIM gossip) for liveness: a replica that stops answering
//     probes leaves the alive set within seconds; one that leaves gracefully
//     leaves it at once. Each member's gossip meta carries its record, so
//     every replica knows the others' xDS addresses and readiness. With
//     Config.GossipKeyFile, gossip is encrypted and authenticated with
//     memberlist's keyring, kept current from the file (keyring.go): a
//     host without a key is never admitted to gossip. Gossip says who is
//     alive, never who is a replica.
//
// The Ring is a consistent hash with virtual nodes over the members that
// are both alive in gossip and registered in etcd (the Ready ones of them
// when they are a majority), built the same way on every replica from the
// same inputs: the same node id has the same home everywhere once gossip
// and the registry watches have converged. A process that gossips (with
// the key, or in clear when none is set) but is not registered is never
// home to any node. The ring is immutable and swapped atomically; Changed
// tells when a new one is in place.
//
// The Agent is a replica's cluster policy over its Membership: it joins
// once etcd answers (retrying), tells the ring the replica is not ready
// only after a grace (replicas that lose etcd together notice seconds
// apart), and calls the rebalance it is given once the ring has settled
// after a change. Config.SetReplicaAddrs derives the addresses a replica
// advertises from its flags and bound listeners.
//
// The package does not relay streams, move them, or serve anything: it
// answers "who is alive" and "whose is this node", and says when homes may
// have moved. It never writes under <prefix>resources/.
package shard
