// Package clustertest runs a whole local Legation deployment for a test:
// a real etcd cluster (one etcd process per member), xds-node replicas as
// processes, and HAProxy in front of them, each on an address of its own
// under a 127.0.N. prefix. It is for tests only.
//
// It drives deploy/local/cluster.sh, the script people use to run the same
// cluster by hand, so what the tests exercise is what the README tells
// users to run. It builds the etcd (at the version go.mod pins) and
// xds-node binaries once per test process, picks a 127.0.N. prefix no
// other test process uses, and stops everything when the test ends, or,
// if the test process dies first, as soon as it has died.
//
// It needs bash and HAProxy (`make setup` installs it) and the go command
// (`go test` puts it on PATH). It does not start Envoy or any xDS client:
// tests bring their own.
package clustertest
