// Package tracing owns Legation's OpenTelemetry traces: the tracer
// provider a process builds from the standard OTEL_* environment
// variables (off when they name no exporter), the gRPC stats handlers
// (otelgrpc) used only when it is on, the trace context an apply stores
// with its change in etcd, and a replica's push spans: one per revision
// that carries an apply's trace context, from the view's event to the
// last response sent, with clients' ACKs and NACKs as bounded events;
// and a span per NACK recorded in a node's status, in the trace of the
// apply it traces to (bounded per apply).
//
// It does not decide what a stream sends, nor when: package xdsstream
// tells it, through a small interface, of responses sent and answered.
package tracing
