package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
)

// BackendHeader is the response header in which a Backend names itself.
const BackendHeader = "x-legation-demo-backend"

// Backend is a gRPC server on one address that answers the standard health
// service's Check (SERVING) with its name in the BackendHeader response
// header: the smallest echo that tells a caller who answered.
type Backend struct {
	// Name is what the backend answers with.
	Name string
	lis  net.Listener
	srv  *grpc.Server
	done chan struct{}
}

// StartBackend listens on addr (host:port; port 0 picks one) and serves
// until Stop.
func StartBackend(name, addr string) (*Backend, error) {
	if name == "" {
		return nil, errors.New("demo: backend name is empty")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("demo: backend %s: %w", name, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := grpc.SetHeader(ctx, metadata.Pairs(BackendHeader, name)); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer()) // "" is SERVING
	b := &Backend{Name: name, lis: lis, srv: srv, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		srv.Serve(lis) //nolint:errcheck // returns once Stop is called
	}()
	return b, nil
}

// Addr is the address the backend listens on.
func (b *Backend) Addr() string { return b.lis.Addr().String() }

// Port is the TCP port the backend listens on.
func (b *Backend) Port() int { return b.lis.Addr().(*net.TCPAddr).Port }

// Stop closes the listener and every connection, and waits for the server
// to end. Calling it again does nothing.
func (b *Backend) Stop() {
	b.srv.Stop()
	<-b.done
}

// ClientConfig says how the demo client reaches the control plane and
// which target it calls.
type ClientConfig struct {
	// Target is the xDS target called, e.g. "xds:///echo".
	Target string
	// XDSServer is the control plane's xDS address (host:port, plaintext).
	XDSServer string
	// NodeID and NodeCluster are the client's xDS node; Legation puts the
	// node in the scope named by its cluster (xds-node --group-by cluster).
	NodeID, NodeCluster string
}

// DefaultClientConfig is the demo's client: xds:///echo through dev mode's
// xDS port, as node demo-client in scope demo.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{
		Target:      "xds:///echo",
		XDSServer:   "127.0.0.1:18000",
		NodeID:      "demo-client",
		NodeCluster: "demo",
	}
}

// Bootstrap is grpc-go's xDS bootstrap JSON for cfg.
func (cfg ClientConfig) Bootstrap() []byte {
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":    cfg.XDSServer,
			"channel_creds": []any{map[string]any{"type": "insecure"}},
			// Keep the listener and cluster when a response leaves them
			// out (see docs/concepts/serving-xds.md).
			"server_features": []string{"ignore_resource_deletion"},
		}},
		"node": map[string]any{"id": cfg.NodeID, "cluster": cfg.NodeCluster},
	})
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return b
}

// Dial makes a gRPC channel to cfg.Target resolved by grpc-go's xDS
// resolver with a bootstrap of its own (cfg.Bootstrap), so that several
// clients with different nodes can live in one process. The caller closes
// it.
func Dial(cfg ClientConfig) (*grpc.ClientConn, error) {
	switch {
	case cfg.Target == "":
		return nil, errors.New("demo: client: target is empty")
	case !strings.HasPrefix(cfg.Target, "xds:///"):
		return nil, fmt.Errorf("demo: client: target %q is not xds:///NAME", cfg.Target)
	case cfg.XDSServer == "":
		return nil, errors.New("demo: client: xDS server address is empty")
	case cfg.NodeID == "":
		return nil, errors.New("demo: client: node id is empty")
	}
	// grpc-go's public way is a file named by GRPC_XDS_BOOTSTRAP, shared by
	// the whole process; this constructor takes the bootstrap per channel.
	r, err := xds.NewXDSResolverWithConfigForTesting(cfg.Bootstrap())
	if err != nil {
		return nil, fmt.Errorf("demo: xds resolver: %w", err)
	}
	cc, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
	if err != nil {
		return nil, fmt.Errorf("demo: dial %s: %w", cfg.Target, err)
	}
	return cc, nil
}

// Call makes one Check RPC on cc and returns the name of the backend that
// answered.
func Call(ctx context.Context, cc *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var md metadata.MD
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		return "", err
	}
	names := md.Get(BackendHeader)
	if len(names) != 1 || names[0] == "" {
		return "", fmt.Errorf("demo: answer without one %s header: %q", BackendHeader, names)
	}
	return names[0], nil
}

// Split is what one window of calls got: how many each backend answered,
// and how many failed.
type Split struct {
	// End is when the window ended.
	End time.Time
	// Counts is the number of answers by backend name.
	Counts map[string]int
	// Errors is the number of calls that failed; LastError the last one.
	Errors    int
	LastError error
}

// Total is the number of calls answered.
func (s Split) Total() int {
	n := 0
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// Share is the fraction of answered calls that name answered (0 when none
// was).
func (s Split) Share(name string) float64 {
	t := s.Total()
	if t == 0 {
		return 0
	}
	return float64(s.Counts[name]) / float64(t)
}

// String is the split as printed each window, backends by name:
// "backend-a  50%  backend-b  50%   (200 calls)".
func (s Split) String() string {
	var b strings.Builder
	names := make([]string, 0, len(s.Counts))
	for n := range s.Counts {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s %3.0f%%  ", n, 100*s.Share(n))
	}
	fmt.Fprintf(&b, " (%d calls", s.Total())
	if s.Errors > 0 {
		fmt.Fprintf(&b, ", %d failed: %v", s.Errors, s.LastError)
	}
	b.WriteString(")")
	return b.String()
}

// Run calls cc one call after the other, at most one per interval, and
// hands report the Split of each window until ctx ends; then it returns
// ctx's error. report is called from Run's goroutine and the next window
// waits for it.
func Run(ctx context.Context, cc *grpc.ClientConn, interval, window time.Duration, report func(Split)) error {
	if interval <= 0 || window <= 0 {
		return fmt.Errorf("demo: client: interval %s and window %s must be > 0", interval, window)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	cur := Split{Counts: map[string]int{}}
	end := time.Now().Add(window)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		name, err := Call(ctx, cc)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			cur.Errors++
			cur.LastError = err
		default:
			cur.Counts[name]++
		}
		if now := time.Now(); !now.Before(end) {
			cur.End = now
			report(cur)
			cur = Split{Counts: map[string]int{}}
			end = now.Add(window)
		}
	}
}
