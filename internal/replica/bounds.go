package replica

import (
	"time"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// The stream bounds, as the flags give them and as the stream core and
// the relay take them: a flag's zero is no bound; a limits.Bound says
// which it is by name.

// unbounded is the bound a flag's value says: its zero is no bound.
func unbounded[N int | time.Duration](v N) limits.Bound[N] {
	return limits.MaxOrNone(v)
}

// streamBounds sets the bounds of the SotW and delta streams in x.
func (c *Config) streamBounds(x *xdsstream.Config) {
	x.FirstRequestTimeout = unbounded(c.FirstRequestTimeout)
	x.MaxNames = unbounded(c.MaxNames)
	x.MaxSubscribedBytes = unbounded(c.MaxSubscribedBytes)
	x.MaxSubscribedBytesPerConn = unbounded(c.MaxSubscribedBytesPerConn)
	x.MaxNameLength = unbounded(c.MaxNameLength)
	x.MaxNodeIDLength = unbounded(c.MaxNodeIDLength)
	x.MaxNackMessage = unbounded(c.MaxNackMessage)
	x.SendTimeout = unbounded(c.SendTimeout)
}

// maxVHDSGroups is delta.Config.MaxVHDSGroups.
func (c *Config) maxVHDSGroups() limits.Bound[int] { return unbounded(c.MaxVHDSGroups) }

// lrsMaxNodeIDLength is lrs.Config.MaxNodeIDLength.
func (c *Config) lrsMaxNodeIDLength() limits.Bound[int] { return unbounded(c.MaxNodeIDLength) }

// relayBounds sets the bounds of the relayed streams in r.
func (c *Config) relayBounds(r *relay.Config) {
	r.SendTimeout = unbounded(c.SendTimeout)
}
