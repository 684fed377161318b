// Package lrs serves Envoy's load reporting service
// (envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats) and
// aggregates what the clients report across the whole cluster.
//
// A Server answers each stream with the clusters to report on (all of
// them, or Config.Clusters) and the reporting interval, then accepts the
// stream's reports: per cluster and locality, the requests issued,
// succeeded, errored and in progress, the drops (in total and per
// category) and the named load metrics. Bad reports (an interval that is
// not positive or is absurd, a cluster the node cannot see, more
// localities, clusters, categories or metrics than the bounds) are cut to
// the bounds or skipped, and counted by reason; they never end the stream
// or grow memory without bound. Reports also count against the node that
// sent them, per window: cluster stats that take a node past
// Config.MaxRate are refused, and a node's rows beyond
// Config.MaxRowsPerNode are summed into one of its own, so that one node
// cannot drown or crowd out the others. Rows name the node and the
// identity of the client that reported for it (Config.Identity).
//
// Each replica rolls what its own nodes reported up into windows of one
// interval, aligned on the wall clock, and its Server.Run publishes each
// closed window to etcd as one small JSON value at
// "<prefix>load/<replica>/<window start>", under a lease of its own, in
// one transaction that also deletes its windows beyond the last
// Config.Windows: one etcd transaction per interval (at least a second),
// whatever the number of nodes. Read and Summarize, used by any replica
// and by xdsadmin, read every replica's windows and answer for the whole
// cluster.
//
// It does not decide homes: the relay sends each LRS stream to its node's
// home replica, like the node's xDS streams. It does not know the
// resources either: Config.Known says whether a node can see a cluster.
package lrs
