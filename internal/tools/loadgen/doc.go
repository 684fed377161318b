// Package loadgen is Legation's load generator, the engine of
// cmd/xds-loadgen: it simulates a fleet of Envoys on ADS (state of the
// world or delta), writes a scenario of endpoint changes through a Target
// (etcd through the store, as xdsadmin writes, or the control endpoint of
// the go-control-plane server under bench/gcp), and measures, for every
// change, how long each client took from the commit to the response that
// carried it, what the clients received, and what the server spent (its
// process CPU and RSS, read from its own /metrics).
//
// A simulated client behaves like Envoy: it subscribes to every cluster
// (CDS wildcard), then to the EDS service names of the clusters received,
// ACKs each response (NACKs a configurable fraction of them once it is
// synced), and opens its stream again with a capped exponential backoff
// when it ends, counting the stream errors.
//
// It owns the clients, the scenario and the result (Result, its JSON
// schema and its text summary). It does not own a server: the caller
// starts the replica or the go-control-plane server it measures, nor the
// fixture it seeds (fixture.Set, from internal/testkit/fixture, which the
// tests and benchmarks build theirs with too).
package loadgen
