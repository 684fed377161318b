package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// Config configures a Store.
type Config struct {
	// Client is the etcd client. Required; the Store does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix, ending in '/'. Empty means
	// keyspace.DefaultPrefix.
	Prefix string
	// MaxTxnOps is the etcd servers' --max-txn-ops. An apply that needs
	// more operations fails before it is sent, unless chunked. Zero: 128,
	// etcd's default.
	MaxTxnOps int
	// MaxRequestBytes is the etcd servers' --max-request-bytes. Zero:
	// 1.5 MiB, etcd's default.
	MaxRequestBytes int
	// Writer is recorded in every envelope written ("who wrote it"), and
	// in the history.
	Writer string
	// HistoryKeep is how many history records are kept (see
	// HistoryRecord): each transaction deletes those older than the
	// HistoryKeep newest. Zero: DefaultHistoryKeep.
	HistoryKeep int
	// PageSize is the number of keys read per range request. Zero: 1000.
	PageSize int64
	// Logger receives warnings about malformed values; nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every default filled in except
// Client.
func DefaultConfig() Config {
	return Config{
		Prefix:          keyspace.DefaultPrefix,
		MaxTxnOps:       128,                 // etcd's default --max-txn-ops
		MaxRequestBytes: 3 * 1024 * 1024 / 2, // etcd's default --max-request-bytes
		PageSize:        1000,
		HistoryKeep:     DefaultHistoryKeep,
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.MaxTxnOps == 0 {
		c.MaxTxnOps = d.MaxTxnOps
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.PageSize == 0 {
		c.PageSize = d.PageSize
	}
	if c.HistoryKeep == 0 {
		c.HistoryKeep = d.HistoryKeep
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the fields against each other.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("store: Client is required")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("store: prefix %q must start and end with '/'", c.Prefix)
	case c.MaxTxnOps < 1:
		return fmt.Errorf("store: MaxTxnOps %d must be positive", c.MaxTxnOps)
	case c.MaxRequestBytes < 1024:
		return fmt.Errorf("store: MaxRequestBytes %d is below 1 KiB", c.MaxRequestBytes)
	case c.PageSize < 1:
		return fmt.Errorf("store: PageSize %d must be positive", c.PageSize)
	case c.HistoryKeep < 1:
		return fmt.Errorf("store: HistoryKeep %d must be positive", c.HistoryKeep)
	}
	return nil
}

// Store reads and writes resources in etcd. Its methods may be called
// concurrently.
type Store struct {
	cfg  Config
	kv   clientv3.KV
	root string // keyspace.Resources under cfg.Prefix
}

// New returns a Store. It does no I/O.
func New(cfg Config) (*Store, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, kv: cfg.Client, root: keyspace.Resources.Prefix(cfg.Prefix)}, nil
}

// Writer is who the store records as writing.
func (s *Store) Writer() string { return s.cfg.Writer }

// Prefix returns the key prefix.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// EtcdKey returns the etcd key of k.
func (s *Store) EtcdKey(k Key) string { return s.root + k.path() }

// ErrNotFound is returned by Get for a key that does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrConflict is returned by Apply when, after the plan was made, a
// resource was created or changed in a (type, scope) directory the plan
// declares a resource in (written, deleted or left unchanged) or prunes,
// or a Store wrote to one of its scopes (a deletion, say).
var ErrConflict = errors.New("store: resources changed since the plan was made; plan again")

// ErrLimit is wrapped by errors about an apply beyond etcd's limits.
var ErrLimit = errors.New("store: beyond etcd's transaction limits")

// wrapErr turns etcd errors into clear ones.
func (s *Store) wrapErr(what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("store: %s: revision compacted: etcd no longer holds that history: %w", what, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("store: %s: revision is newer than etcd's current one: %w", what, err)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w: %s: etcd refused more operations than its --max-txn-ops allows (xdsadmin assumed %d): use --chunked, or give the server's value with --max-txn-ops: %v", ErrLimit, what, s.cfg.MaxTxnOps, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), status.Code(err) == codes.ResourceExhausted:
		// ResourceExhausted: gRPC refused the message before etcd saw it,
		// beyond --max-request-bytes plus gRPC's allowance (or beyond the
		// client's own send limit).
		return fmt.Errorf("%w: %s: etcd refused a request larger than its --max-request-bytes (xdsadmin assumed %d): use --chunked, or give the server's value with --max-request-bytes: %v", ErrLimit, what, s.cfg.MaxRequestBytes, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("store: %s: etcd did not answer in time (is it running and reachable at the configured endpoints?): %w", what, err)
	}
	return fmt.Errorf("store: %s: %w", what, err)
}
