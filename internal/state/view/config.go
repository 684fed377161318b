package view

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/state/keyspace"
)

// Config configures a View.
type Config struct {
	// Client is the etcd client. Required; the View does not close it.
	Client *clientv3.Client
	// Prefix is the key prefix. Empty means keyspace.DefaultPrefix.
	Prefix string
	// PageSize is the number of keys per range request of a load. Zero:
	// 1000.
	PageSize int64
	// HistoryWindow is how many revisions before the start-up revision the
	// view reads from etcd's history, to learn which sets changed (and
	// which keys were deleted) recently: a client presenting a version in
	// that window is answered exactly. Zero: 10000. Negative: none.
	HistoryWindow int64
	// CatchUpEvery is how often, at most, while changes are published,
	// the view wakes the readers none of them concerned (Interest),
	// so that they let go of the snapshots published since. Zero: 10s.
	CatchUpEvery time.Duration
	// MaxTombstones bounds the deletions remembered; the oldest are
	// forgotten first. Zero: 100000.
	MaxTombstones int
	// RetryInterval is the pause between attempts when etcd fails. Zero:
	// 500ms.
	RetryInterval time.Duration
	// ProgressInterval is how long the watch may be quiet before the view
	// asks etcd for a progress notification, so that LastHeard stays
	// fresh while etcd answers. Zero: 1s.
	ProgressInterval time.Duration
	// StallTimeout ends a watch that heard nothing (not even progress) for
	// that long, and starts another: the etcd client may then reach a
	// member that answers. Zero: 5s.
	StallTimeout time.Duration
	// Clock is the replica's awake clock: StallTimeout and
	// ProgressInterval are measured on it, so that a process starved of
	// CPU does not take its own silence for etcd's. Nil: the wall clock.
	Clock *awake.Clock
	// Serves reports whether the replica serves the resource named name:
	// one it does not (an xdstp name of an authority it was not given,
	// xdstp.Authorities) is skipped, and to clients does not exist. Nil:
	// every name.
	Serves func(name string) bool
	// Logger gets warnings (malformed values, lost watches); nil discards.
	Logger *slog.Logger
	// Registerer gets the view's metrics; nil registers nothing.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a Config with every default filled in
// except Client.
func DefaultConfig() Config {
	return Config{
		Prefix:        keyspace.DefaultPrefix,
		PageSize:      1000,
		HistoryWindow: 10000,
		CatchUpEvery:  defaultCatchUpEvery,
		MaxTombstones: 100000,
		RetryInterval: 500 * time.Millisecond,

		ProgressInterval: time.Second,
		StallTimeout:     5 * time.Second,
	}
}

// Validate checks the config.
func (c *Config) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("view: Client is required")
	case !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("view: prefix %q must start and end with '/'", c.Prefix)
	case c.PageSize < 1:
		return fmt.Errorf("view: PageSize %d must be positive", c.PageSize)
	case c.MaxTombstones < 1:
		return fmt.Errorf("view: MaxTombstones %d must be positive", c.MaxTombstones)
	case c.ProgressInterval < 0 || c.StallTimeout < 0:
		return fmt.Errorf("view: ProgressInterval %s and StallTimeout %s must not be negative", c.ProgressInterval, c.StallTimeout)
	case c.StallTimeout > 0 && c.StallTimeout <= c.ProgressInterval:
		return fmt.Errorf("view: StallTimeout %s must be longer than ProgressInterval %s", c.StallTimeout, c.ProgressInterval)
	}
	return nil
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.Prefix == "" {
		c.Prefix = d.Prefix
	}
	if c.PageSize == 0 {
		c.PageSize = d.PageSize
	}
	if c.HistoryWindow == 0 {
		c.HistoryWindow = d.HistoryWindow
	}
	if c.MaxTombstones == 0 {
		c.MaxTombstones = d.MaxTombstones
	}
	if c.CatchUpEvery == 0 {
		c.CatchUpEvery = d.CatchUpEvery
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = d.StallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
