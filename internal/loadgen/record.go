package loadgen

import (
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/chaos"
)

// Recorder receives what the clients see: each stream's start and end and
// every response (Config.Recorder). Record is called from every client's
// goroutine at once, so it must be safe for concurrent use; it runs on the
// client's receive path, so it must not block for long (a slow recorder
// delays the client's ACKs). It may keep e: nothing changes it after.
type Recorder interface {
	Record(e *chaos.Event)
}

var _ Recorder = (*chaos.Writer)(nil)

// recordStart records the start of the client's next stream and returns
// its number; 0 when nothing is recorded.
func (c *client) recordStart(mode string) int64 {
	r := c.f.cfg.Recorder
	if r == nil {
		return 0
	}
	c.streams++
	r.Record(&chaos.Event{Kind: chaos.KindStart, Time: time.Now(), Client: c.node.GetId(), Stream: c.streams, Mode: mode})
	return c.streams
}

// recordEnd records the end of stream n, when it was recorded.
func (c *client) recordEnd(n int64, mode string, err error) {
	if n == 0 {
		return
	}
	e := &chaos.Event{Kind: chaos.KindEnd, Time: time.Now(), Client: c.node.GetId(), Stream: n, Mode: mode}
	if err != nil {
		e.Error = err.Error()
	}
	c.f.cfg.Recorder.Record(e)
}

// recordSotW records a SotW response received on stream n: every
// resource's name (field 1 of each type the clients ask for) at the
// response's version.
func (c *client) recordSotW(n int64, resp *discoveryv3.DiscoveryResponse) {
	if n == 0 {
		return
	}
	rs := make([]chaos.Resource, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		rs[i] = chaos.Resource{Name: claName(a.GetValue()), Version: resp.GetVersionInfo()}
	}
	c.f.cfg.Recorder.Record(&chaos.Event{Kind: chaos.KindResponse, Time: time.Now(), Client: c.node.GetId(), Stream: n,
		Mode: chaos.ModeSotW, Type: resp.GetTypeUrl(), Version: resp.GetVersionInfo(), Nonce: resp.GetNonce(), Resources: rs})
}

// recordDelta records a delta response received on stream n.
func (c *client) recordDelta(n int64, resp *discoveryv3.DeltaDiscoveryResponse) {
	if n == 0 {
		return
	}
	rs := make([]chaos.Resource, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		rs[i] = chaos.Resource{Name: r.GetName(), Version: r.GetVersion()}
	}
	c.f.cfg.Recorder.Record(&chaos.Event{Kind: chaos.KindResponse, Time: time.Now(), Client: c.node.GetId(), Stream: n,
		Mode: chaos.ModeDelta, Type: resp.GetTypeUrl(), Version: resp.GetSystemVersionInfo(), Nonce: resp.GetNonce(),
		Resources: rs, Removed: resp.GetRemovedResources()})
}
