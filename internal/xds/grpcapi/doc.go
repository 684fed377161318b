// Package grpcapi is the one place that registers Legation's gRPC services
// on a server: the state-of-the-world ADS and per-type xDS services (with
// their unary Fetch methods), delta ADS and the per-type delta services,
// VHDS, CSDS, LRS (load reporting) and the standard gRPC health service.
//
// The generated gRPC interfaces give every per-type service its own
// methods (StreamClusters, DeltaClusters, FetchClusters, ...); the shims in
// this package turn each into a call of one protocol server with the
// method's resource type, so neither protocol package registers anything
// and neither knows of the other. It declares the small interfaces it
// needs (SotW, Delta) and imports no server package.
//
// The server these services are registered on must use the options of
// ServerOptions: responses are sent as shared, pre-encoded bytes.
package grpcapi
