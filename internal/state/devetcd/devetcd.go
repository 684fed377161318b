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
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
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
	// Logger gets a line when the server is up, and one per compaction
	// (Debug) or defragmentation (Info); nil discards. etcd's own logs are
	// kept at error level.
	Logger *slog.Logger
	// StartTimeout bounds the wait for the server to be ready. Zero: 60s.
	StartTimeout time.Duration

	// HistoryRevisions is how many revisions of history compaction keeps:
	// "xdsadmin get --revision", "diff" and "watch --from" work back that
	// far, and a replica whose watch broke resumes from where it was
	// rather than reloading. Zero: DefaultHistoryRevisions; negative:
	// never compact (the history grows without bound).
	HistoryRevisions int64
	// CompactCheck is how often the server's revision is looked at; it is
	// compacted when HistoryRevisions/10 revisions (at least 1) have
	// passed beyond the history kept. Zero: 1s.
	CompactCheck time.Duration
	// DefragFreeBytes: after a compaction, the database file is
	// defragmented (given back to the file system) when at least this many
	// bytes and at least half the file are free. etcd serves nothing while
	// it defragments: in dev mode that is a few milliseconds per MiB.
	// Zero: 64 MiB; negative: never.
	DefragFreeBytes int64
	// QuotaBytes is etcd's --quota-backend-bytes: beyond it etcd raises
	// the NOSPACE alarm and refuses every write until the space is
	// reclaimed and the alarm disarmed. Zero: DefaultQuotaBytes.
	QuotaBytes int64
	// UnsafeNoFsync is etcd's --unsafe-no-fsync: writes are not synced to
	// disk, and a crash may lose or corrupt them. For tests that make many
	// writes, never for data anyone keeps.
	UnsafeNoFsync bool
}

// The defaults of the history kept and of the quota. 10,000 revisions of
// small dev resources are a few MiB; the quota is a quarter of etcd's own
// 2 GiB default, ample for a dev store whose history is bounded.
const (
	DefaultHistoryRevisions = 10000
	DefaultQuotaBytes       = 512 << 20
)

// Server is a running embedded etcd.
type Server struct {
	etcd     *embed.Etcd
	endpoint string
	log      *slog.Logger

	stop chan struct{} // closed by Close: stops the compactor
	done chan struct{} // closed when the compactor has returned
	once sync.Once     // makes Close idempotent
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
	cfg = cfg.withDefaults()
	clientAddr, err := ResolvePort(cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("devetcd: client address: %w", err)
	}
	peerAddr, err := ResolvePort(cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("devetcd: peer address: %w", err)
	}
	e, err := embed.StartEtcd(embedConfig(cfg, clientAddr, peerAddr))
	if err != nil {
		return nil, fmt.Errorf("devetcd: start on %s: %w", clientAddr, err)
	}
	if err := waitReady(ctx, e, cfg.StartTimeout); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Info("embedded etcd serving", "endpoint", clientAddr, "dir", cfg.Dir,
		"history_revisions", cfg.HistoryRevisions, "quota_bytes", cfg.QuotaBytes)
	s := &Server{etcd: e, endpoint: clientAddr, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go s.compactor(cfg)
	return s, nil
}

// withDefaults is cfg with the defaults its fields' comments give in
// place of their zero (or, for some, negative) values.
func (cfg Config) withDefaults() Config {
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = "127.0.0.1:2379"
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.HistoryRevisions == 0 {
		cfg.HistoryRevisions = DefaultHistoryRevisions
	}
	if cfg.CompactCheck <= 0 {
		cfg.CompactCheck = time.Second
	}
	if cfg.DefragFreeBytes == 0 {
		cfg.DefragFreeBytes = 64 << 20
	}
	if cfg.QuotaBytes <= 0 {
		cfg.QuotaBytes = DefaultQuotaBytes
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	return cfg
}

// embedConfig is the configuration of the single member of cfg (with
// its defaults), serving clients on clientAddr and its peer port on
// peerAddr, both host:port with the port picked.
func embedConfig(cfg Config, clientAddr, peerAddr string) *embed.Config {
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
	ec.QuotaBackendBytes = cfg.QuotaBytes
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	// etcd's own auto-compaction stays off: its revision mode looks every
	// five minutes, time enough for a write loop to add millions of
	// revisions, and its periodic mode bounds time, not size. The
	// compactor keeps a number of revisions, checked every second.
	return ec
}

// waitReady waits until e serves, or until ctx ends or timeout passes;
// then it closes e and returns why.
func waitReady(ctx context.Context, e *embed.Etcd, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("devetcd: %w", err)
	case <-t.C:
		e.Close()
		return fmt.Errorf("devetcd: not ready after %s", timeout)
	case <-ctx.Done():
		e.Close()
		return ctx.Err()
	}
}

// compactor compacts the history to the last cfg.HistoryRevisions
// revisions, in steps of a tenth of that, and defragments when a
// compaction leaves much of the file free. It returns when Close is called.
func (s *Server) compactor(cfg Config) {
	defer close(s.done)
	if cfg.HistoryRevisions < 0 {
		return
	}
	step := max(cfg.HistoryRevisions/10, 1)
	t := time.NewTicker(cfg.CompactCheck)
	defer t.Stop()
	var compacted int64
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if to := s.etcd.Server.KV().Rev() - cfg.HistoryRevisions; to >= compacted+step {
			if err := s.compact(to); err != nil {
				s.log.Warn("embedded etcd: compaction failed; retrying", "revision", to, "err", err)
				continue
			}
			compacted = to
			s.log.Debug("embedded etcd: compacted", "revision", to)
		}
		// Looked at on every tick, not only after a compaction: bbolt
		// counts the pages a compaction frees as free only once a later
		// write commits.
		be := s.etcd.Server.Backend()
		size, inUse := be.Size(), be.SizeInUse()
		if free := size - inUse; cfg.DefragFreeBytes > 0 && free >= cfg.DefragFreeBytes && free >= size/2 {
			if err := s.etcd.Server.Defragment(); err != nil {
				s.log.Warn("embedded etcd: defragmentation failed", "err", err)
				continue
			}
			s.log.Info("embedded etcd: defragmented", "db_bytes_before", size, "db_bytes_in_use", inUse, "db_bytes", be.Size())
		}
	}
}

func (s *Server) compact(rev int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { // Close cancels a compaction under way
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	_, err := s.etcd.Server.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: rev, Physical: true})
	if errors.Is(err, mvcc.ErrCompacted) {
		return nil // compacted already, by an operator's etcdctl
	}
	return err
}

// Endpoint is the host:port clients dial.
func (s *Server) Endpoint() string { return s.endpoint }

// Err reports a fatal server error; it never closes on its own.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the compactor and the server, and waits for them. It is
// safe to call twice.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.etcd.Close() // which panics when called twice
	})
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
