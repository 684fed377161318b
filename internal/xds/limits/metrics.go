package limits

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Limit labels of legation_limits_hits_total set by this package. Other
// packages add their own (Hits).
const (
	LimitStreamsPerConn  = "streams_per_conn"
	LimitStreamRate      = "stream_rate"
	LimitMaxStreams      = "max_streams"
	LimitMaxStreamsShare = "max_streams_share"
	// The relay budget's: streams relayed here by another replica.
	LimitRelayStreamRate   = "relay_stream_rate"
	LimitMaxRelayedStreams = "max_relayed_streams"
)

// Hits returns legation_limits_hits_total on reg, labelled by limit: one
// counter vec for every bound of the replica, whichever package enforces
// it. It registers the vec on first use and returns the registered one
// afterwards, so each package calls Hits(reg) and they share it.
func Hits(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "legation_limits_hits_total",
		Help: "Requests or streams refused or cut because they went beyond a bound, by the bound (limit).",
	}, []string{"limit"})
	got, err := RegisterOrGet(reg, v)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	return got, nil
}

// Panics returns legation_panics_total on reg, registered on first use
// and shared afterwards (as Hits).
func Panics(reg prometheus.Registerer) (prometheus.Counter, error) {
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_panics_total",
		Help: "Panics recovered in gRPC handlers and stream goroutines; each ended one call with INTERNAL.",
	})
	got, err := RegisterOrGet(reg, c)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	return got, nil
}

// RegisterOrGet registers c on reg, or returns the collector of the same
// description registered there before (two servers of one process share
// their metrics): what every package with metrics shared by several
// instances registers them with.
func RegisterOrGet[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if got, ok := are.ExistingCollector.(C); ok {
				return got, nil
			}
		}
		var zero C
		return zero, fmt.Errorf("register metric %T: %w", c, err)
	}
	return c, nil
}
