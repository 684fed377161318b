package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestGRPCXDSResourceErrorsIgnored: grpc-go's xDS client (v1.85, which
// does not read resource_errors) asks for listener svc before it exists.
// The replica answers with no listener and a NOT_FOUND resource error for
// svc; grpc-go skips the field, ACKs the response (no NACK), and once
// the listener is applied it is sent and the client routes to the
// backend: TP3's "the xDS management server must assume the responses
// remain valid for older clients".
func TestGRPCXDSResourceErrorsIgnored(t *testing.T) {
	const id = "reserr-client"
	e := newEnv(t)
	e.applyAndWait(t, strings.Join([]string{routeYAML, clusterYAML, endpointsYAML(e.a.port)}, "---\n"))
	cc := e.newClient(t, id)
	cc.Connect()
	waitFor(t, "the listener's NOT_FOUND sent and ACKed", func() (bool, string) {
		sent := e.metric(t, "legation_sotw_resource_errors_total", `code="NOT_FOUND",type="listener"`)
		st := e.stream(t, id)
		if st == nil || st.Types["listener"] == nil {
			return false, fmt.Sprintf("errors sent %v, stream %+v", sent, st)
		}
		ls := st.Types["listener"]
		return sent >= 1 && ls.VersionSent != "" && ls.VersionAcked == ls.VersionSent && ls.LastNack == "",
			fmt.Sprintf("errors sent %v, listener %+v", sent, *ls)
	})
	if got := e.metric(t, "legation_sotw_nacks_total", `type="listener"`); got != 0 {
		t.Fatalf("legation_sotw_nacks_total{type=listener} = %v: grpc-go rejected a response carrying resource_errors", got)
	}
	e.apply(t, listenerYAML(true))
	waitReaches(t, cc, e.a.port)
	for _, typ := range []string{"listener", "route", "cluster", "endpoint"} {
		if got := e.metric(t, "legation_sotw_nacks_total", `type="`+typ+`"`); got != 0 {
			t.Errorf("legation_sotw_nacks_total{type=%s} = %v, want 0", typ, got)
		}
	}
}
