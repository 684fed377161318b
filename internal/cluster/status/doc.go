// Package status owns the status records of the Envoy nodes connected to
// the cluster: what each replica writes to etcd about the nodes whose
// streams it serves, and what any replica (for CSDS) and xdsadmin read
// back.
//
// A record is one small JSON value per node id at "<prefix>status/<node
// id>" (the id raw after the prefix; it may hold '/'), attached to the
// writing replica's lease: the replica's Writer keeps it alive, rewrites
// only the records that changed, deletes those of nodes that left (unless
// another replica took the key over), and revokes the lease when it stops,
// so the records of a replica that crashed expire with its lease. Status
// never touches "<prefix>resources/".
//
// CSDS serves envoy.service.status.v3.ClientStatusDiscoveryService from
// the records, so every replica answers for the whole cluster. It answers
// from a copy of the records in memory that one etcd watch keeps current,
// so a call costs etcd nothing however often it comes; requests are
// bounded in node matchers, and a stream asks its authorizer again each
// time the rules change.
//
// The package does not collect the state of streams: the xDS servers (ads,
// delta) keep it, and FromStreams turns their snapshots into records. It
// does not decide homes either (shard does): a record's home is whichever
// replica serves the node's streams.
package status
