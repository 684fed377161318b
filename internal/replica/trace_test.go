package replica_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tracing"
)

// otlpReceiver is an OTLP/gRPC trace collector: it keeps every span it
// is sent, with its service.name.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []gotSpan
}

// gotSpan is a span the receiver got.
type gotSpan struct {
	service string
	*tracepb.Span
}

func (s gotSpan) attr(k string) *commonpb.AnyValue {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value
		}
	}
	return nil
}

func (s gotSpan) String() string {
	return fmt.Sprintf("%s %s trace %x span %x parent %x", s.service, s.Name, s.TraceId, s.SpanId, s.ParentSpanId)
}

func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, gotSpan{service, sp})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) got() []gotSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]gotSpan(nil), r.spans...)
}

// setOTLPEnv points the OTEL_* variables at r, over OTLP/gRPC, with a
// short batch delay.
func setOTLPEnv(t *testing.T, r *otlpReceiver) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+r.addr)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
}

// unsetOTELEnv clears every OTEL_* variable for the test.
func unsetOTELEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}

// xdsadminApply runs `xdsadmin -o json apply -f FILE` in-process on e,
// the adminctl code path, and returns the revision it wrote and its
// stderr.
func xdsadminApply(t *testing.T, e *xdsEnv, doc string) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "apply.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"--etcd-endpoints", e.Etcd.Endpoint, "--etcd-prefix", e.prefix, "-o", "json", "apply", "-f", file}
	if code := adminctl.Run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("xdsadmin apply: exit %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errOut)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Revision <= 0 {
		t.Fatalf("xdsadmin apply -o json: %v in %s", err, &out)
	}
	return fmt.Sprint(res.Revision), errOut.String()
}

const tracedClusterYAML = `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: traced
type: STATIC
connect_timeout: 2s
`

// TestTraces: with the OTEL_* variables naming an OTLP/gRPC collector,
// one `xdsadmin apply` on a 3-replica cluster yields one trace holding
// the apply's span, each replica's view and push spans (one push span per
// replica, over all its streams) and the clients' ACKs and NACK as
// events of the push spans, and the NACK as a span of its own in the
// apply's trace, naming the node, type, versions and message. Every
// client is connected to a replica that is not its home, so each stream
// is relayed: otelgrpc traces the relay's stream on both sides.
func TestTraces(t *testing.T) {
	recv := startOTLP(t)
	unsetOTELEnv(t)
	setOTLPEnv(t, recv)

	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	var rs []*running
	for i := range 3 {
		cfg := e.config(t)
		cfg.Name = fmt.Sprintf("replica-%d", i)
		tp, err := tracing.New(context.Background(), tracing.Config{Service: "xds-node",
			Attributes: []attribute.KeyValue{attribute.String("legation.replica", cfg.Name)}})
		if err != nil {
			t.Fatal(err)
		}
		if !tp.On() {
			t.Fatal("tracing is off with OTEL_TRACES_EXPORTER=otlp")
		}
		t.Cleanup(func() { tp.Shutdown(context.Background()) }) //nolint:errcheck // the spans asserted on are in already
		cfg.Tracing = tp
		r := startXDS(t, cfg, rev)
		if !r.PushTracingForTest() {
			t.Fatalf("%s: no push tracer with traces on", cfg.Name)
		}
		rs = append(rs, r)
	}
	for _, r := range rs {
		xdstest.WaitFor(t, "a ring of 3 replicas", func() (bool, string) {
			c := getDebugCluster(t, r)
			return len(c.Ring) == 3, jsonString(c)
		})
	}

	// One client per replica, whose home is the next replica; and one
	// more on replica-0, homed at replica-1, that NACKs.
	idHomedAt := func(home string, not map[string]bool) string {
		for i := 0; ; i++ {
			id := fmt.Sprintf("envoy-%d", i)
			if !not[id] && rs[0].HomeForTest(id) == home {
				not[id] = true
				return id
			}
		}
	}
	used := map[string]bool{}
	type client struct {
		s    *xdstest.SotWStream
		nack bool
	}
	var clients []client
	for i := range 3 {
		home := fmt.Sprintf("replica-%d", (i+1)%3)
		clients = append(clients, client{s: openCDS(t, rs[i].XDSAddr(), idHomedAt(home, used))})
	}
	nackNode := idHomedAt("replica-1", used)
	clients = append(clients, client{s: openCDS(t, rs[0].XDSAddr(), nackNode), nack: true})
	// openCDS took the first response, which is not the apply's.
	applied, stderr := xdsadminApply(t, e, tracedClusterYAML)
	if !strings.Contains(stderr, "traces on") {
		t.Errorf("xdsadmin's stderr does not say traces are on:\n%s", stderr)
	}
	for _, c := range clients {
		resp := c.s.Expect()
		if resp.GetVersionInfo() != applied {
			t.Fatalf("a response at version %s, want the apply's %s", resp.GetVersionInfo(), applied)
		}
		if c.nack {
			c.s.Nack(resp, fmt.Sprint(rev), "rejected for the test")
		} else {
			c.s.Ack(resp)
		}
	}

	var apply gotSpan
	views, pushes := map[string]gotSpan{}, map[string]gotSpan{}
	xdstest.WaitFor(t, "the apply's trace with 3 view and 3 push spans", func() (bool, string) {
		apply, views, pushes = gotSpan{}, map[string]gotSpan{}, map[string]gotSpan{}
		spans := recv.got()
		for _, s := range spans {
			if s.Name == "legation.apply" && s.service == "xdsadmin" {
				apply = s
			}
		}
		if apply.Span == nil {
			return false, fmt.Sprintf("no legation.apply span among %d", len(spans))
		}
		for _, s := range spans {
			if !bytes.Equal(s.TraceId, apply.TraceId) || s.attr("legation.revision").GetIntValue() != parseInt(t, applied) {
				continue
			}
			switch s.Name {
			case "legation.view":
				views[s.attr("legation.replica").GetStringValue()] = s
			case "legation.push":
				pushes[s.attr("legation.replica").GetStringValue()] = s
			}
		}
		return len(views) == 3 && len(pushes) == 3, fmt.Sprintf("apply %v; views %v; pushes %v", apply, views, pushes)
	})

	if got := apply.attr("legation.revision").GetIntValue(); fmt.Sprint(got) != applied {
		t.Errorf("legation.apply's revision = %d, want %s", got, applied)
	}
	for i := range 3 {
		name := fmt.Sprintf("replica-%d", i)
		v, p := views[name], pushes[name]
		if !bytes.Equal(v.ParentSpanId, apply.SpanId) {
			t.Errorf("%s's view span's parent = %x, want the apply's span %x", name, v.ParentSpanId, apply.SpanId)
		}
		if !bytes.Equal(p.ParentSpanId, v.SpanId) {
			t.Errorf("%s's push span's parent = %x, want its view span %x", name, p.ParentSpanId, v.SpanId)
		}
		if p.StartTimeUnixNano != v.EndTimeUnixNano || p.EndTimeUnixNano < p.StartTimeUnixNano {
			t.Errorf("%s's push span runs %d..%d, want from the view's event %d", name, p.StartTimeUnixNano, p.EndTimeUnixNano, v.EndTimeUnixNano)
		}
		wantAcks, wantNacks := int64(1), int64(0)
		if name == "replica-1" {
			wantNacks = 1 // the extra client's home
		}
		if got := p.attr("legation.push.sends").GetIntValue(); got != wantAcks+wantNacks {
			t.Errorf("%s: legation.push.sends = %d, want %d", name, got, wantAcks+wantNacks)
		}
		if a, n := p.attr("legation.push.acks").GetIntValue(), p.attr("legation.push.nacks").GetIntValue(); a != wantAcks || n != wantNacks {
			t.Errorf("%s: acks %d, nacks %d; want %d, %d", name, a, n, wantAcks, wantNacks)
		}
		var acks, nacks int64
		for _, ev := range p.Events {
			node := ""
			for _, a := range ev.Attributes {
				if a.Key == "legation.node" {
					node = a.Value.GetStringValue()
				}
			}
			if rs[0].HomeForTest(node) != name {
				t.Errorf("%s: an event %q for node %q, homed at %s", name, ev.Name, node, rs[0].HomeForTest(node))
			}
			if ev.TimeUnixNano < p.StartTimeUnixNano || ev.TimeUnixNano > p.EndTimeUnixNano {
				t.Errorf("%s: event %s at %d outside the span", name, ev.Name, ev.TimeUnixNano)
			}
			switch ev.Name {
			case "ack":
				acks++
			case "nack":
				nacks++
			}
		}
		if acks != wantAcks || nacks != wantNacks {
			t.Errorf("%s: events: %d ack, %d nack; want %d, %d", name, acks, nacks, wantAcks, wantNacks)
		}
	}
	t.Logf("trace %s: apply %s; 3 view and push spans", hex.EncodeToString(apply.TraceId), apply.Name)
	checkNackSpan(t, recv, apply, nackNode, applied)

	// otelgrpc on the relay: once a relayed stream ends, the replica the
	// client reached has a client span for the stream it opened to the
	// home, and the home a server span, its child.
	clients[0].s.Cancel()
	xdstest.WaitFor(t, "a relayed stream's client span and the home's server span under it", func() (bool, string) {
		spans := recv.got()
		for _, c := range spans {
			if c.Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.HasSuffix(c.Name, "/StreamAggregatedResources") || c.service != "xds-node" {
				continue
			}
			for _, s := range spans {
				if s.Kind == tracepb.Span_SPAN_KIND_SERVER && bytes.Equal(s.ParentSpanId, c.SpanId) && bytes.Equal(s.TraceId, c.TraceId) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d spans", len(spans))
	})
}

// checkNackSpan waits for the span legation.nack that the NACKing
// client's home (replica-1) puts in the apply's trace once its status
// writer records the NACK: a child of the apply's span, naming the
// node, type, versions and message, and the apply.
func checkNackSpan(t *testing.T, recv *otlpReceiver, apply gotSpan, node, applied string) {
	t.Helper()
	var nack gotSpan
	xdstest.WaitFor(t, "a legation.nack span in the apply's trace", func() (bool, string) {
		var n int
		for _, sp := range recv.got() {
			if sp.Name == "legation.nack" {
				n++
				if bytes.Equal(sp.TraceId, apply.TraceId) {
					nack = sp
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d legation.nack spans, none in trace %x", n, apply.TraceId)
	})
	want := map[string]string{
		"legation.replica": "replica-1", "legation.type": "cluster", "legation.version": applied,
		"legation.nack.message": "rejected for the test", "legation.node": node,
	}
	for k, v := range want {
		if got := nack.attr(k).GetStringValue(); got != v {
			t.Errorf("legation.nack's %s = %q, want %q", k, got, v)
		}
	}
	if !bytes.Equal(nack.ParentSpanId, apply.SpanId) || nack.attr("legation.apply").GetStringValue() == "" || nack.service != "xds-node" {
		t.Errorf("legation.nack %v (apply %q): want a child of the apply's span %x, naming the apply", nack, nack.attr("legation.apply").GetStringValue(), apply.SpanId)
	}
}

func parseInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return n
}

// TestTracesOff: with no OTEL_* variable, no exporter is built (the
// provider is off and its spans do not record), the replica's servers
// carry no push tracer, and an apply stores no trace context in its
// marker.
func TestTracesOff(t *testing.T) {
	unsetOTELEnv(t)
	tp, err := tracing.New(context.Background(), tracing.Config{Service: "xds-node"})
	if err != nil {
		t.Fatal(err)
	}
	if tp.On() || len(tp.ServerOptions()) != 0 || len(tp.DialOptions()) != 0 {
		t.Fatalf("tracing on (or otelgrpc options) with no OTEL_* variable")
	}
	if _, span := tp.Tracer().Start(context.Background(), "x"); span.IsRecording() || span.SpanContext().IsValid() {
		t.Errorf("a span with tracing off records (%v) or has a context (%v)", span.IsRecording(), span.SpanContext())
	}
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Standalone = true
	cfg.Tracing = tp
	r := startXDS(t, cfg, rev)
	if r.PushTracingForTest() {
		t.Error("the replica has a push tracer with tracing off")
	}
	s := openCDS(t, r.XDSAddr(), "envoy-0")
	applied, stderr := xdsadminApply(t, e, tracedClusterYAML)
	if stderr != "" {
		t.Errorf("xdsadmin apply wrote to stderr with tracing off:\n%s", stderr)
	}
	s.Ack(s.Expect())
	markers, err := store.ApplyMarkersAt(context.Background(), e.Etcd.Client(t), e.prefix, parseInt(t, applied))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := markers[store.DefaultScope]
	if !ok || m.Traceparent != "" || m.At.IsZero() {
		t.Errorf("apply markers at the apply's revision = %+v, want the default scope's, without a traceparent", markers)
	}
}
