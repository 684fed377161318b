package shard

import (
	"bytes"
	"context"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// A member memberlist declares dead is not dropped from the ring at
// once: it stays while its registration in etcd is live, for
// Config.RingDamping of this replica's awake time (Config.Clock), and
// leaves the ring only if it is still dead then. A replica that was
// slow, not dead (starved of CPU, throttled, paused by a long
// collection), refutes the death within that time and keeps its nodes;
// no stream moves. What removes a member at once is the end of its
// registration: a graceful leave revokes it, an expired lease ends it;
// and a death confirmed: the member's xDS port refuses a connection, so
// no process listens there any more (it crashed or was killed), which a
// frozen or starved process never does (its kernel still answers for
// its sockets). Suspicion alone never reaches here: memberlist tells only
// of deaths.

// events is memberlist's EventDelegate for a Membership. memberlist calls
// it with its node lock held, from several goroutines but never two at a
// time: it only copies the node and wakes the builder.
type events Membership

func (e *events) NotifyJoin(n *memberlist.Node)   { e.set(n) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.set(n) }

// NotifyLeave is a death or a leave (memberlist's Node does not say
// which): the member is damped, or dropped when damping is off.
func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Membership)(e)
	m.nodesMu.Lock()
	g, known := m.nodes[n.Name]
	_, damped := m.dead[n.Name]
	switch {
	case !known || damped:
	case m.cfg.RingDamping <= 0:
		m.metrics.deaths.Inc()
		delete(m.nodes, n.Name)
	default:
		m.metrics.deaths.Inc()
		m.dead[n.Name] = m.cfg.Clock.Now()
		if mem, err := decodeMeta(n.Name, g.addr, g.meta); err == nil {
			m.toProbe[n.Name] = mem.XDSAddr
			kick(m.probeKick)
		}
	}
	m.nodesMu.Unlock()
	kick(m.buildKick)
}

func (e *events) set(n *memberlist.Node) {
	m := (*Membership)(e)
	g := gossipNode{addr: n.Address(), meta: bytes.Clone(n.Meta)}
	m.nodesMu.Lock()
	m.nodes[n.Name] = g
	if _, damped := m.dead[n.Name]; damped {
		delete(m.dead, n.Name)
		m.metrics.revived.Inc()
	}
	m.nodesMu.Unlock()
	kick(m.buildKick)
}

var _ memberlist.EventDelegate = (*events)(nil)

// probeLoop confirms the deaths memberlist declares (toProbe) until ctx
// ends: a member whose xDS address refuses a connection is dead for sure
// and leaves the ring at once, its damping cut short.
func (m *Membership) probeLoop(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.probeKick:
		}
		m.nodesMu.Lock()
		probes := m.toProbe
		m.toProbe = map[string]string{}
		m.nodesMu.Unlock()
		for name, addr := range probes {
			if !refused(ctx, addr, m.cfg.TCPTimeout) {
				continue
			}
			m.nodesMu.Lock()
			if _, damped := m.dead[name]; damped {
				m.dead[name] = time.Time{} // expireDead drops it
				m.metrics.confirmed.Inc()
			}
			m.nodesMu.Unlock()
			kick(m.buildKick)
		}
	}
}

// refused reports whether a TCP connection to addr is refused (within
// timeout): nothing listens there.
func refused(ctx context.Context, addr string, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close() // a probe: nothing was sent, nothing to report
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// expireDead drops from the alive set the dead members whose damping has
// run out (of awake time), and returns how many are still damped and
// the awake time until the first of them runs out (0: none). nodesMu is
// held.
func (m *Membership) expireDead() (damped int, next time.Duration) {
	for name, since := range m.dead {
		left := m.cfg.RingDamping - m.cfg.Clock.Since(since)
		if since.IsZero() || left <= 0 { // confirmed, or damped long enough
			delete(m.dead, name)
			delete(m.nodes, name)
			continue
		}
		damped++
		if next == 0 || left < next {
			next = left
		}
	}
	return damped, next
}

// armDamping makes the builder look again in next (0: no member is
// damped). buildMu is held.
func (m *Membership) armDamping(next time.Duration) {
	if m.dampTimer != nil {
		m.dampTimer.Stop()
		m.dampTimer = nil
	}
	if next > 0 {
		m.dampTimer = time.AfterFunc(next+time.Millisecond, func() { kick(m.buildKick) })
	}
}

// overloadWindow is how recent a starvation of this process must be for
// Overloaded to say so.
const overloadWindow = 5 * time.Second

// Overloaded reports whether this replica is overloaded: starved of CPU
// now or within the last 5s (Config.Clock), or memberlist's own health
// score raised (its probes timing out on this side, Lifeguard's local
// health). It does not block.
func (m *Membership) Overloaded() bool {
	return m.cfg.Clock.Starved(overloadWindow) || m.ml.GetHealthScore() > 0
}
