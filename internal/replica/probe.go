package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The probe listener (--probe-addr) serves /healthz and /readyz alone,
// in plain HTTP, on a port of their own: however busy --http-addr is
// (REST pollers, scrapes, idle or hostile connections), the kubelet's
// probes reach the replica, so it is not restarted for being loaded. They
// carry nothing secret: "ok", or why the replica is not ready.

// probeTimeout bounds reading a probe's request and writing its answer,
// and how long a probe's keep-alive connection may stay idle.
const probeTimeout = 5 * time.Second

// listenProbe binds --probe-addr, if set.
func (n *Node) listenProbe(lc net.ListenConfig) error {
	if n.cfg.ProbeAddr == "" {
		return nil
	}
	var err error
	if n.probeLis, err = lc.Listen(context.Background(), "tcp", n.cfg.ProbeAddr); err != nil {
		return fmt.Errorf("node: --probe-addr: %w", err)
	}
	return nil
}

// buildProbe makes the probe server, if --probe-addr is set.
func (n *Node) buildProbe() {
	if n.probeLis == nil {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.serveHealthz)
	mux.HandleFunc("GET /readyz", n.serveReadyz)
	n.probeSrv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: probeTimeout,
		ReadTimeout:       probeTimeout,
		WriteTimeout:      probeTimeout,
		IdleTimeout:       probeTimeout,
		MaxHeaderBytes:    8 << 10, // a probe's request is a line and a few headers
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
}

// serveProbe serves the probe listener until shutdownProbe; its error,
// if it stops otherwise, goes to serveErr.
func (n *Node) serveProbe(serveErr chan<- error) {
	if n.probeSrv == nil {
		return
	}
	if err := n.probeSrv.Serve(n.probeLis); !errors.Is(err, http.ErrServerClosed) {
		serveErr <- fmt.Errorf("node: probe server on %s: %w", n.ProbeAddr(), err)
	}
}

// shutdownProbe stops the probe server, letting probes in flight finish
// until ctx ends.
func (n *Node) shutdownProbe(ctx context.Context) {
	if n.probeSrv == nil {
		return
	}
	if err := n.probeSrv.Shutdown(ctx); err != nil {
		n.probeSrv.Close() // only the listener's error, already closed
	}
}

// ProbeAddr is the bound address of the probe listener; "" without
// --probe-addr.
func (n *Node) ProbeAddr() string {
	if n.probeLis == nil {
		return ""
	}
	return n.probeLis.Addr().String()
}
