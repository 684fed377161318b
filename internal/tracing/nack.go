package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Nack is a rejection a replica recorded in a node's status record,
// traced to the applies that wrote what the node rejects.
type Nack struct {
	Node, Group, Type string
	// Version is the version rejected; Acked the last one acknowledged
	// ("" when none).
	Version, Acked string
	Message        string
	Applies        []NackApply
}

// NackApply is an apply a Nack traces to: its id, and its trace context
// (a W3C traceparent; "" when the apply was not traced).
type NackApply struct {
	ID, Traceparent string
}

// maxNackTraces bounds the applies whose count of NACK spans a replica
// remembers; the oldest is forgotten first.
const maxNackTraces = 256

// Nacked makes, for each apply of n that carries a trace context, a
// span legation.nack in the apply's trace, a child of the apply's span,
// at the time of the call: it names the replica, the node, its group, the
// type, the versions rejected and acknowledged, the client's message and
// the apply. At most MaxEvents such spans per apply on this replica; the
// rest are counted in legation_xds_rejected_nodes_by_apply only. It may
// be called concurrently and does not block but on a mutex.
func (p *Pushes) Nacked(n Nack) {
	now := time.Now()
	for _, ap := range n.Applies {
		parent := Parent(ap.Traceparent)
		if !parent.IsValid() || !p.takeNackSpan(ap.ID) {
			continue
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
		_, span := p.tracer.Start(ctx, "legation.nack", trace.WithTimestamp(now),
			trace.WithAttributes(
				attribute.String("legation.replica", p.cfg.Replica),
				attribute.String("legation.apply", ap.ID),
				attribute.String("legation.node", n.Node),
				attribute.String("legation.group", n.Group),
				attribute.String("legation.type", n.Type),
				attribute.String("legation.version", n.Version),
				attribute.String("legation.version_acked", n.Acked),
				attribute.String("legation.nack.message", n.Message)))
		span.End(trace.WithTimestamp(now))
	}
}

// takeNackSpan reports whether apply id may have one more NACK span on
// this replica, and counts it.
func (p *Pushes) takeNackSpan(id string) bool {
	p.nackMu.Lock()
	defer p.nackMu.Unlock()
	if p.nackSpans == nil {
		p.nackSpans = map[string]int{}
	}
	c, ok := p.nackSpans[id]
	if !ok {
		if len(p.nackOrder) >= maxNackTraces {
			delete(p.nackSpans, p.nackOrder[0])
			p.nackOrder = p.nackOrder[1:]
		}
		p.nackOrder = append(p.nackOrder, id)
	}
	if c >= p.cfg.MaxEvents {
		return false
	}
	p.nackSpans[id] = c + 1
	return true
}
