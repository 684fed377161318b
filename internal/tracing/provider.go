package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// Config says what a process's tracer provider is built for.
type Config struct {
	// Service is service.name when OTEL_SERVICE_NAME does not set it
	// ("xds-node", "xdsadmin").
	Service string
	// Attributes are added to the process's resource (the replica's
	// name, say).
	Attributes []attribute.KeyValue
	// Getenv reads the environment; nil: os.Getenv. The exporter itself
	// reads the process's environment (autoexport does), so tests that
	// turn tracing on set real variables.
	Getenv func(string) string
	// Logger gets the one line saying whether traces are on and where
	// they go; nil: discard.
	Logger *slog.Logger
}

// Provider is a process's tracing: on, an SDK tracer provider exporting
// as the OTEL_* variables say; off, a no-op provider that records
// nothing and starts no exporter. Its methods may be called
// concurrently.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
}

// Off is a Provider that records nothing.
func Off() *Provider { return &Provider{tp: noop.NewTracerProvider()} }

// Enabled reports whether the environment turns traces on, and why
// (or why not): on when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or, with OTEL_TRACES_EXPORTER unset, when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is
// set; never when OTEL_SDK_DISABLED is true.
func Enabled(getenv func(string) string) (bool, string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		if off, err := strconv.ParseBool(v); err == nil && off {
			return false, "OTEL_SDK_DISABLED=" + v
		}
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, "OTEL_TRACES_EXPORTER=none"
	case "":
	default:
		return true, "OTEL_TRACES_EXPORTER=" + exp
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return true, k + "=" + v
		}
	}
	return false, "no OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT"
}

// New builds the process's Provider from the environment (see Enabled).
// Off, it returns Off() and starts nothing. On, the exporter is
// autoexport's (OTEL_TRACES_EXPORTER, default otlp; OTLP over
// OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL grpc or http/protobuf, the
// default; endpoint, headers, timeouts from the OTLP variables), behind a
// batch span processor (OTEL_BSP_*), with the sampler of
// OTEL_TRACES_SAMPLER (default parentbased_always_on) and the resource of
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. An exporter that cannot
// be built (an unknown protocol) is an error naming the variable.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	on, why := Enabled(getenv)
	if !on {
		log.Info("traces off", "reason", why)
		return Off(), nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: span exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL): %w", err)
	}
	attrs := append([]attribute.KeyValue{attribute.String("service.name", cfg.Service)}, cfg.Attributes...)
	// The environment's (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
	// win over ours.
	res, err := resource.Merge(resource.NewSchemaless(attrs...), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" {
		exporter = "otlp"
	}
	protocol := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	if protocol == "" {
		protocol = "http/protobuf"
	}
	log.Info("traces on", "reason", why, "exporter", exporter, "protocol", protocol,
		"endpoint", firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
	return &Provider{tp: sdk, sdk: sdk}, nil
}

func firstSet(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// On reports whether spans are recorded and exported.
func (p *Provider) On() bool { return p != nil && p.sdk != nil }

// TracerProvider returns the provider: a no-op one when off.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return noop.NewTracerProvider()
	}
	return p.tp
}

// Tracer returns the tracer Legation's own spans are made with.
func (p *Provider) Tracer() trace.Tracer { return p.TracerProvider().Tracer(instrumentation) }

// instrumentation is the name of Legation's tracer.
const instrumentation = "github.com/legation-io/legation"

// Propagator is the W3C trace context, the only propagation Legation
// uses (gRPC metadata, apply markers).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// ServerOptions returns otelgrpc's server stats handler when on, else
// nothing: each RPC and stream is a span, child of the caller's trace
// context. Message events are not recorded (xDS streams are long), nor
// are health checks.
func (p *Provider) ServerOptions() []grpc.ServerOption {
	if !p.On() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(p.grpcOptions()...))}
}

// DialOptions returns otelgrpc's client stats handler when on, else
// nothing.
func (p *Provider) DialOptions() []grpc.DialOption {
	if !p.On() {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(p.grpcOptions()...))}
}

func (p *Provider) grpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(p.tp),
		otelgrpc.WithPropagators(Propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithMessageEvents(),
		// Health checks come every few seconds from every load balancer.
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/")
		}),
	}
}

// Shutdown flushes the spans not yet exported and stops the exporter,
// bounded by ctx. Off, it does nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Traceparent returns the W3C traceparent of ctx's span, "" when it
// has none.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return c.Get("traceparent")
}

// Parent returns the span context a traceparent names; not valid when
// tp is empty or malformed.
func Parent(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	ctx := Propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
