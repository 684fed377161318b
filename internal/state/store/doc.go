// Package store owns everything that touches etcd's resource keys: the key
// layout, the value envelope, atomic applies (one etcd transaction per
// apply, optionally under one lease), reads now or at a past revision,
// diffs and watches, and the View that xds-node serves from.
//
// Key layout, under the configured prefix (default "/legation/"):
//
//	<prefix>resources/<type>/<scope>/<name>  ->  legation.v1.Envelope
//	<prefix>leases/<lease id in 16 hex digits> ->  LeaseMarker (JSON),
//	    written by RefreshLease under the lease it names
//
// <type> is a short type name (resource.Type.Name), <scope> is "default"
// or a node group and never holds '/', and <name> is the resource name,
// which may. The package does not serve xDS and knows nothing of streams.
//
// The promises its comments cite by number (promise 1, etcd is the truth;
// promise 5, atomic applies) are those of docs/design.md.
package store
