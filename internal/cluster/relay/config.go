package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/xds/limits"
)

// Config configures a Relay.
type Config struct {
	// Self is this replica's name, sent in the marker of the streams it
	// relays. Required.
	Self string
	// Home returns the home replica of nodeID: its name, the address of
	// its gRPC server, and whether it is this replica. Nil: every stream
	// is served locally. It is called once per new stream, from that
	// stream's goroutine, so concurrently; it must not block (read an
	// atomically swapped ring).
	Home func(nodeID string) (name, addr string, self bool)
	// Next, if set, returns the home of nodeID once the replicas named in
	// unreachable are gone from the ring (the next one clockwise). A
	// stream whose home cannot be reached goes there, where it will be
	// once the home is declared dead, rather than being served here and
	// moved again then. Same rules as Home. Nil: served here.
	Next func(nodeID string, unreachable []string) (name, addr string, self bool)
	// TrustMarker, if set, reports whether the MarkerKey on the stream of
	// ctx may be trusted (its peer is a replica); a stream whose marker is
	// not trusted is treated as any client's. Nil: every marker is.
	TrustMarker func(ctx context.Context) bool
	// Forward, if set, returns metadata sent to the home with each stream
	// relayed: what the home needs to know of the client (its identity).
	// Its keys replace the client's own of the same names.
	Forward func(ctx context.Context) metadata.MD
	// SourceIP, if valid, is the address relay connections are made from:
	// this replica's advertised IP, the one the registry holds, which a
	// home in plaintext trusts the relay marker from. Where it cannot be
	// bound, the system picks. Zero: the system picks.
	SourceIP netip.Addr
	// DialOptions are appended to the options of the connections to home
	// replicas, after the defaults (insecure transport credentials, and
	// reconnection backoff capped at 5s so that a home that comes back is
	// used again soon): put TLS credentials here.
	DialOptions []grpc.DialOption
	// ConnectTimeout bounds how long opening a relay stream may wait for
	// the home to accept it; after it the stream is served locally. Zero:
	// 3s.
	ConnectTimeout time.Duration
	// Clock is the replica's awake clock, on which ConnectTimeout is
	// measured. Nil: the wall clock.
	Clock *awake.Clock
	// ConnIdleTimeout is how long a connection to a home replica that
	// relays no stream is kept for the next one before it is closed. Zero:
	// 1m.
	ConnIdleTimeout time.Duration
	// SendTimeout bounds one message's send to the client of a relayed
	// stream (--send-timeout): a client that takes nothing for that long
	// (its flow-control window stays full) gets UNAVAILABLE, and the
	// home's leg is cancelled. Unset: 30s.
	SendTimeout limits.Bound[time.Duration]
	// Rate is how many streams per second Rebalance closes at most, and
	// Burst how many it may close at once. Set both, or neither for 50
	// and 10.
	Rate  float64
	Burst int
	// Drained, if set, is called with a stream's context when Drain or
	// Shed has closed the stream, or when the interceptor refused it
	// because of a drain, unless another replica relayed it here (its connection
	// carries other relayed streams, which must not all end at once):
	// the caller closes the stream's connection (its peer address is in
	// ctx), so that the client reconnects through the load balancer
	// instead of retrying on a connection to a replica that goes away. It
	// is called from Drain's goroutine or the stream's, concurrently, and
	// must not block.
	Drained func(ctx context.Context)
	// Logger gets relay failures (at Warn, at most one every few seconds)
	// and per-stream events (at Debug); nil discards.
	Logger *slog.Logger
	// Registerer gets the metrics (legation_relay_*); nil registers none.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults, without Self or Home.
func DefaultConfig() Config {
	return Config{
		ConnectTimeout:  3 * time.Second,              // a dial and one round trip, with room for a busy home
		ConnIdleTimeout: time.Minute,                  // spares a dial per stream when a home has few
		SendTimeout:     limits.Max(30 * time.Second), // as xdsstream's: a healthy client reads within a few RTTs
		Rate:            50,                           // 10,000 streams move in ~3 minutes
		Burst:           10,
	}
}

// Validate checks the config, with zero values standing for defaults.
func (c *Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("relay: Self is required")
	case c.ConnectTimeout < 0:
		return fmt.Errorf("relay: ConnectTimeout %s is negative", c.ConnectTimeout)
	case c.ConnIdleTimeout < 0:
		return fmt.Errorf("relay: ConnIdleTimeout %s is negative", c.ConnIdleTimeout)
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return fmt.Errorf("relay: Rate %v is not a finite non-negative number", c.Rate)
	case c.Burst < 0:
		return fmt.Errorf("relay: Burst %d is negative", c.Burst)
	case c.Rate == 0 && c.Burst != 0, c.Rate != 0 && c.Burst == 0:
		return fmt.Errorf("relay: Rate %v and Burst %d: set both or neither", c.Rate, c.Burst)
	}
	return nil
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.ConnIdleTimeout == 0 {
		c.ConnIdleTimeout = d.ConnIdleTimeout
	}
	c.SendTimeout = c.SendTimeout.Or(d.SendTimeout)
	if c.Rate == 0 && c.Burst == 0 {
		c.Rate, c.Burst = d.Rate, d.Burst
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}
