// Package devetcd runs a single-member etcd inside the process: the store
// of xds-node's dev mode and of tests. It owns the embedded server's
// configuration and lifecycle, nothing else; production replicas talk to a
// real etcd cluster through package store.
package devetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config says where and how to run the embedded etcd.
type Config struct {
	// Dir holds etcd's data. Required.
	Dir string
	// ClientAddr is the host:port clients dial. Port 0 picks a free port.
	// Empty means 127.0.0.1:2379.
	ClientAddr string
	// PeerAddr is the raft peer address (only this member uses it). Empty
	// picks a free port on 127.0.0.1.
	PeerAddr string
	// MaxTxnOps and MaxRequestBytes are etcd's --max-txn-ops and
	// --max-request-bytes. Zero keeps etcd's defaults (128, 1.5 MiB).
	MaxTxnOps       uint
	MaxRequestBytes uint
	// Logger gets a line when the server is up; nil discards. etcd's own
	// logs are kept at error level.
	Logger *slog.Logger
	// StartTimeout bounds the wait for the server to be ready. Zero: 60s.
	StartTimeout time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
}

// portTries is how many times Start picks free ports for addresses
// given with port 0 when another process took one before etcd bound it.
const portTries = 3

// Start starts etcd and waits until it serves, or until ctx ends or
// StartTimeout passes. An address given with port 0 gets a free port;
// should another process take it before etcd binds it, Start picks
// again (etcd writes nothing before it has bound its listeners).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	for try := 1; ; try++ {
		s, err := start(ctx, cfg)
		if err == nil || try == portTries || !errors.Is(err, syscall.EADDRINUSE) || !anyPort(cfg) {
			return s, err
		}
	}
}

// anyPort reports whether cfg leaves a port for Start to pick.
func anyPort(cfg Config) bool {
	if cfg.PeerAddr == "" {
		return true // Start picks the peer port
	}
	for _, a := range []string{cfg.ClientAddr, cfg.PeerAddr} {
		if _, port, err := net.SplitHostPort(a); err == nil && port == "0" {
			return true
		}
	}
	return false
}

func start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("devetcd: Dir is required")
	}
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:2379"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	clientAddr, err := ResolvePort(cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("devetcd: client address: %w", err)
	}
	peerAddr, err := ResolvePort(cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("devetcd: peer address: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = "dev"
	ec.Dir = cfg.Dir
	ec.LogLevel = "error"
	// etcd logs every listener it closes at error level; a dev store and
	// tests have no use for its logs.
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu := url.URL{Scheme: "http", Host: clientAddr}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	if cfg.MaxTxnOps > 0 {
		ec.MaxTxnOps = cfg.MaxTxnOps
	}
	if cfg.MaxRequestBytes > 0 {
		ec.MaxRequestBytes = cfg.MaxRequestBytes
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("devetcd: start on %s: %w", clientAddr, err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("devetcd: %w", err)
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("devetcd: not ready after %s", timeout)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("embedded etcd serving", "endpoint", clientAddr, "dir", cfg.Dir)
	}
	return &Server{etcd: e, endpoint: clientAddr}, nil
}

// Endpoint is the host:port clients dial.
func (s *Server) Endpoint() string { return s.endpoint }

// Err reports a fatal server error; it never closes on its own.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for it. It is safe to call twice.
func (s *Server) Close() error {
	s.etcd.Close()
	return nil
}

// ResolvePort replaces port 0 in addr (host:port) by a port free on host,
// so that a client can be pointed at the server before Start: Start then
// binds that port. The port is free when checked; another process could
// take it before etcd binds it, which Start reports as an error.
func ResolvePort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
