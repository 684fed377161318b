package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/legation-io/legation/internal/state/resource"
)

func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"only the protocol", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "x"}, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"an exporter", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"SDK not disabled", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"blank endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := Enabled(func(k string) string { return tt.env[k] })
			if got != tt.want || why == "" {
				t.Errorf("Enabled = %v (%q), want %v", got, why, tt.want)
			}
		})
	}
}

func TestNewBadProtocol(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := New(context.Background(), Config{Service: "test"}); err == nil {
		t.Fatal("New with OTEL_EXPORTER_OTLP_PROTOCOL=carrier-pigeon: no error")
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	if got := Traceparent(context.Background()); got != "" {
		t.Errorf("Traceparent of a context without a span = %q", got)
	}
	if Parent("").IsValid() || Parent("not-a-traceparent").IsValid() {
		t.Error("Parent of an empty or malformed traceparent is valid")
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1, 2}, SpanID: [8]byte{3}, TraceFlags: trace.FlagsSampled})
	tp := Traceparent(trace.ContextWithSpanContext(context.Background(), sc))
	if got := Parent(tp); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("Parent(%q) = %v, want %v", tp, got, sc)
	}
}

// TestPushBounds: a push span holds at most MaxEvents answer events and
// counts them all; answers to revisions not followed, and sends at
// revisions whose view event was taken without a trace, are not kept.
func TestPushBounds(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, err := NewPushes(PushConfig{Provider: &Provider{tp: sdk, sdk: sdk}, Client: nopKV{}, Replica: "r1", MaxEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{9}, SpanID: [8]byte{8}, TraceFlags: trace.FlagsSampled, Remote: true})
	view := time.Now()
	p.pending[10] = &push{rev: 10, viewAt: view, resolved: true, parent: parent, committed: view.Add(-time.Millisecond)}
	p.handled = 10
	for range 10 {
		p.Sent(10)
	}
	for i := range 8 {
		p.Answered(resource.Cluster, "10", "n", i == 0)
	}
	p.Answered(resource.Cluster, "11", "n", false) // not followed
	p.Answered(resource.Cluster, "x", "n", false)  // not a revision
	p.Sent(9)                                      // view event taken, no trace
	if len(p.pending) != 1 {
		t.Errorf("pending = %d revisions, want 1", len(p.pending))
	}
	p.flush(time.Time{})
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want view and push", len(spans))
	}
	push := spans[1]
	if push.Name() != "legation.push" || push.Parent().SpanID() != spans[0].SpanContext().SpanID() || spans[0].Parent().SpanID() != parent.SpanID() {
		t.Errorf("spans %s (parent %v), %s (parent %v)", spans[0].Name(), spans[0].Parent(), push.Name(), push.Parent())
	}
	want := map[string]int64{"legation.push.sends": 10, "legation.push.acks": 7, "legation.push.nacks": 1, "legation.push.events_dropped": 5}
	for _, a := range push.Attributes() {
		if w, ok := want[string(a.Key)]; ok {
			if a.Value.AsInt64() != w {
				t.Errorf("%s = %d, want %d", a.Key, a.Value.AsInt64(), w)
			}
			delete(want, string(a.Key))
		}
	}
	if len(want) != 0 {
		t.Errorf("attributes missing: %v", want)
	}
	if n := len(push.Events()); n != 3 {
		t.Errorf("%d events, want MaxEvents (3)", n)
	}
}
