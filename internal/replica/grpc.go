package replica

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/limits"
)

// buildLimits makes the bounds and admission of the xDS port's streams
// and calls (package limits).
func (n *Node) buildLimits() error {
	cfg := n.cfg
	var err error
	if n.limits, err = limits.New(limits.Config{
		MaxStreamsPerConn: cfg.MaxStreamsPerConn,
		StreamRate:        cfg.StreamRate,
		StreamBurst:       cfg.StreamBurst,
		MaxStreams:        cfg.MaxStreams,
		MaxWait:           time.Second,
		ClientKey:         n.admissionKey,
		ShareFactor:       cfg.MaxStreamsShare,
		ShareFloor:        n.shareFloor(),
		FairShare:         n.fairShare,
		Full:              n.xdsConns.closeSoon, // the client's retry goes elsewhere
		Trusted:           n.relayedByReplica,
		RelayStreamRate:   cfg.RelayStreamRate,
		RelayStreamBurst:  cfg.RelayStreamBurst,
		MaxRelayedStreams: cfg.MaxRelayedStreams,
		Exempt:            func(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") },
		Logger:            n.log,
		Registerer:        n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// buildGRPC makes the gRPC server of --xds-addr and registers its
// services: ADS and the per-type xDS services (SotW and delta), CSDS, LRS
// and health, which says NOT_SERVING until the replica is ready.
func (n *Node) buildGRPC() error {
	gm, err := grpcMetrics(n.reg)
	if err != nil {
		return err
	}
	n.grpcSrv = grpc.NewServer(n.serverOptions(gm)...)
	n.health = health.NewServer()
	// health.NewServer reports the server ("") SERVING; it is not until
	// the view is loaded.
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	grpcapi.Register(n.grpcSrv, grpcapi.Services{
		SotW:   servedSotW{n.sotw, &n.served},
		Delta:  servedDelta{n.delta, &n.served},
		CSDS:   n.csds,
		LRS:    n.lrs,
		Health: n.health,
	})
	gm.InitializeMetrics(n.grpcSrv) // every method's series, at 0
	return nil
}

// serverOptions are the gRPC server's options: the message and handshake
// bounds, keepalive, the HTTP/2 windows, the stats handlers, the
// interceptors (gm's metrics first), tracing and TLS.
func (n *Node) serverOptions(gm *grpcprom.ServerMetrics) []grpc.ServerOption {
	cfg := n.cfg
	opts := append(grpcapi.ServerOptions(),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgSize),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             cfg.KeepaliveMinTime,
			PermitWithoutStream: true, // idle Envoys ping too
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  cfg.PingTime,
			Timeout:               cfg.KeepaliveTimeout,
			MaxConnectionAge:      cfg.MaxConnectionAge, // 0: grpc-go's default, no age
			MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		}),
		// Static HTTP/2 windows for what clients send (requests, ACKs,
		// load reports: small): grpc-go's default sizes them by probing
		// the bandwidth, a ping to the client on each burst of data it
		// receives, so every round of ACKs after a push cost each
		// connection a write and a read more. 1 MiB per connection,
		// 64 KiB per stream (HTTP/2's default) hold any request up to
		// --max-recv-msg-size with window updates; what the replica sends
		// is bounded by the client's windows, not these.
		grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(1<<20),
		grpc.StatsHandler(n.limits.StatsHandler()),
		grpc.StatsHandler(n.xdsConns), // counts connections closed before their handshakes
		// One stream interceptor (see streamInterceptor for the order and
		// why one); the unary ones in the same order.
		n.streamInterceptors(gm),
		grpc.ChainUnaryInterceptor(gm.UnaryServerInterceptor(), n.limits.RecoverUnary(), n.limits.AdmitUnary(),
			n.guard.AdminUnaryInterceptor(statusv3.ClientStatusDiscoveryService_FetchClientStatus_FullMethodName)))
	opts = append(opts, cfg.Tracing.ServerOptions()...)
	if n.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.tls.ServerConfig(xdsClientAuth(cfg.MTLS())))))
	}
	return opts
}

// xdsClientAuth is the xDS port's client-certificate policy.
func xdsClientAuth(mtls bool) tls.ClientAuthType {
	if mtls {
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// streamInterceptors is the gRPC server's stream interceptor
// (streamInterceptor, gm's metrics first, the relay last), with a test's
// interceptor, if it set one, innermost.
func (n *Node) streamInterceptors(gm *grpcprom.ServerMetrics) grpc.ServerOption {
	inner := n.relay.StreamInterceptor()
	if n.cfg.testStreamInterceptor != nil {
		inner = then(inner, n.cfg.testStreamInterceptor)
	}
	return grpc.StreamInterceptor(streamInterceptor(gm, n.limits, n.guard.Admin,
		statusv3.ClientStatusDiscoveryService_StreamClientStatus_FullMethodName, inner))
}
