package replica

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/legation-io/legation/internal/xds/sotw"
)

// buildHTTP makes the HTTP server of --http-addr: /healthz, /readyz,
// /metrics (what gatherer gathers), /debug/ and REST-JSON, behind the
// guard, on the bounded listener (httpConns).
func (n *Node) buildHTTP(gatherer prometheus.Gatherer) error {
	cfg := n.cfg
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", n.serveHealthz)
	mux.HandleFunc("GET /readyz", n.serveReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	n.handleDebug(mux)
	mux.Handle(sotw.RESTPattern, n.sotw.RESTHandler())
	n.httpSrv = &http.Server{
		Handler: n.guard.HTTP(mux),
		// REST polls, probes and scrapes are small requests answered at
		// once: nothing is streamed, so a write deadline cuts nothing
		// legitimate.
		ReadHeaderTimeout: min(10*time.Second, cfg.HTTPReadTimeout),
		ReadTimeout:       cfg.HTTPReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
	if n.tls != nil {
		// Health, readiness and metrics stay reachable without a client
		// certificate (load balancers, Prometheus); REST and /debug/ ask
		// for one (access.Guard).
		auth := tls.NoClientCert
		if cfg.MTLS() {
			auth = tls.VerifyClientCertIfGiven
		}
		n.httpSrv.TLSConfig = n.tls.ServerConfig(auth)
	}
	var err error
	if n.httpConns, err = newHTTPConns(n.httpLis, cfg.HTTPMaxConns, cfg.HTTPMaxConnsPerIP, n.tls != nil, n.reg, n.log); err != nil {
		return err
	}
	n.httpSrv.ConnState = n.httpConns.trackState
	return nil
}

// The HTTP server's write and idle timeouts: fixed, as no response is
// long-lived (--http-read-timeout bounds the client's side).
const (
	httpWriteTimeout = 30 * time.Second
	httpIdleTimeout  = 2 * time.Minute
)
