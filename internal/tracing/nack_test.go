package tracing

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestNackedBounds: each NACK is a span in the trace of each apply it
// traces to that carries a trace context, a child of the apply's span;
// an apply has at most MaxEvents of them on a replica; an apply without
// a trace context (or a malformed one) has none.
func TestNackedBounds(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, err := NewPushes(PushConfig{Provider: &Provider{tp: sdk, sdk: sdk}, Client: nopKV{}, Replica: "r1", MaxEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	const a = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const b = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
	for i := range 5 {
		p.Nacked(Nack{Node: "n", Type: "cluster", Version: "12", Acked: "10", Message: "bad",
			Applies: []NackApply{{ID: "A", Traceparent: a}, {ID: "B", Traceparent: b}, {ID: "C"}, {ID: "D", Traceparent: "junk"}}})
		if i == 0 && len(rec.Ended()) != 2 {
			t.Fatalf("%d spans for one NACK traced to two applies with a trace, want 2", len(rec.Ended()))
		}
	}
	per := map[string]int{}
	for _, s := range rec.Ended() {
		parent := Parent(a)
		if s.SpanContext().TraceID() != parent.TraceID() {
			parent = Parent(b)
		}
		if s.Name() != "legation.nack" || s.Parent().SpanID() != parent.SpanID() || s.SpanContext().TraceID() != parent.TraceID() {
			t.Errorf("span %s, parent %v: want legation.nack under an apply's span", s.Name(), s.Parent())
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "legation.apply" {
				per[kv.Value.AsString()]++
			}
		}
	}
	if per["A"] != 3 || per["B"] != 3 || len(per) != 2 {
		t.Errorf("spans per apply %v, want 3 (MaxEvents) for A and B, none for C and D", per)
	}
}
