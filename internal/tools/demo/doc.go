// Package demo is the traffic demo of `make demo`: echo backends that say
// which backend they are, and a proxyless gRPC client (grpc-go's xDS
// resolver) that calls them continuously and reports, window by window,
// how its calls were split between them. It owns neither the control plane
// nor the configuration: the demo program starts xds-node and applies
// examples/ with xdsadmin, as a user would.
package demo
