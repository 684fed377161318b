// Package xdstest is the one test kit of Legation's xDS tests: the two
// test timeouts, a test environment (a real embedded etcd, a store and a
// running view on it), fixtures (listeners, routes, clusters, endpoints,
// runtime layers and the store.Puts that write them, built by
// internal/testkit/fixture and failing the test on error), raw SotW and delta
// ADS client streams that send exactly what a test says and receive with a
// timeout, the decoded body of a replica's /debug/streams, and the
// measuring tools and push scenario the fan-out benchmarks share.
//
// It is a normal package so that the tests of several packages can share
// it, but only tests import it. It builds no xDS server and imports neither
// internal/xds/sotw nor internal/xds/delta: each test package builds its own server
// (or node) from the environment's View and registers it with
// internal/xds/grpcapi, and Serve runs it on 127.0.0.1.
//
// Everything here takes a testing.TB and cleans up after itself with
// tb.Cleanup, in the reverse order of creation (a stream before its
// connection, a server before the view it reads, the view before etcd).
package xdstest
