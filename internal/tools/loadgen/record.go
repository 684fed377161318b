package loadgen

import (
	"maps"
	"time"

	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// Recorder receives what the clients see: each stream's start and end and
// every response (Config.Recorder). Record is called from every client's
// goroutine at once, so it must be safe for concurrent use; it runs on the
// client's receive path, so it must not block for long (a slow recorder
// delays the client's ACKs). It may keep e: nothing changes it after.
type Recorder interface {
	Record(e *record.Event)
}

var _ Recorder = (*record.Writer)(nil)

// recordStart records the start of the client's next stream and returns
// its number; 0 when nothing is recorded. presented is what the stream's
// first requests present (Config.Resume).
func (c *client) recordStart(mode string, presented map[string]map[string]string) int64 {
	r := c.f.cfg.Recorder
	if r == nil {
		return 0
	}
	c.streams++
	r.Record(&record.Event{Kind: record.KindStart, Time: time.Now(), Client: c.node.GetId(), Stream: c.streams, Mode: mode, Presented: presented})
	return c.streams
}

// recordEnd records the end of stream n, when it was recorded.
func (c *client) recordEnd(n int64, mode string, err error) {
	if n == 0 {
		return
	}
	e := &record.Event{Kind: record.KindEnd, Time: time.Now(), Client: c.node.GetId(), Stream: n, Mode: mode}
	if err != nil {
		e.Error = err.Error()
	}
	c.f.cfg.Recorder.Record(e)
}

// recordSotW records a SotW response received on stream n: every
// resource's name (field 1 of each type the clients ask for) at the
// response's version.
func (c *client) recordSotW(n int64, resp *sotwResponse) {
	if n == 0 {
		return
	}
	rs := make([]record.Resource, len(resp.bodies))
	for i, b := range resp.bodies {
		rs[i] = record.Resource{Name: claName(b), Version: resp.versionInfo, Hash: record.BodyHash(b)}
	}
	c.f.cfg.Recorder.Record(&record.Event{Kind: record.KindResponse, Time: time.Now(), Client: c.node.GetId(), Stream: n,
		Mode: record.ModeSotW, Type: resp.typeURL, Version: resp.versionInfo, Nonce: resp.nonce, Resources: rs})
}

// recordDelta records a delta response received on stream n.
func (c *client) recordDelta(n int64, resp *deltaResponse) {
	if n == 0 {
		return
	}
	rs := make([]record.Resource, len(resp.resources))
	for i, r := range resp.resources {
		rs[i] = record.Resource{Name: string(r.name), Version: string(r.version), Hash: record.BodyHash(r.body)}
	}
	c.f.cfg.Recorder.Record(&record.Event{Kind: record.KindResponse, Time: time.Now(), Client: c.node.GetId(), Stream: n,
		Mode: record.ModeDelta, Type: resp.typeURL, Version: resp.systemVersionInfo, Nonce: resp.nonce,
		Resources: rs, Removed: resp.removed})
}

// presentedSotW returns the versions a resuming SotW client presents per
// type URL, under the name "" (record.Event.Presented); nil without
// Config.Resume or before anything was ACKed.
func (c *client) presentedSotW() map[string]map[string]string {
	var out map[string]map[string]string
	for typ, v := range c.sotwVersions {
		if v == "" {
			continue
		}
		if out == nil {
			out = map[string]map[string]string{}
		}
		out[typ] = map[string]string{"": v}
	}
	return out
}

// presentedDelta returns a copy of what a resuming delta client holds per
// type URL, its initial_resource_versions; nil without Config.Resume.
func (c *client) presentedDelta() map[string]map[string]string {
	if len(c.deltaVersions) == 0 {
		return nil
	}
	out := make(map[string]map[string]string, len(c.deltaVersions))
	for typ, held := range c.deltaVersions {
		if len(held) > 0 {
			out[typ] = maps.Clone(held)
		}
	}
	return out
}

// holdDelta notes what an ACKed delta response leaves the client holding.
func (c *client) holdDelta(resp *deltaResponse) {
	held := c.deltaVersions[resp.typeURL]
	if held == nil {
		held = map[string]string{}
		c.deltaVersions[resp.typeURL] = held
	}
	for _, r := range resp.resources {
		held[string(r.name)] = string(r.version)
	}
	for _, n := range resp.removed {
		delete(held, n)
	}
}

// namesOf returns the names marked in subscribed, in index order.
func namesOf(subscribed []bool, names []string) []string {
	var out []string
	for i, s := range subscribed {
		if s {
			out = append(out, names[i])
		}
	}
	return out
}

// marked returns the indexes marked in subscribed.
func marked(subscribed []bool) []int {
	var out []int
	for i, s := range subscribed {
		if s {
			out = append(out, i)
		}
	}
	return out
}
