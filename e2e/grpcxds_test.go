package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestGRPCXDSRoutesAndFollowsEndpointChange: grpc-go's xDS client follows
// listener -> route -> cluster -> endpoints served by a replica to backend
// A, then, after xdsadmin points the endpoints at backend B, to B.
func TestGRPCXDSRoutesAndFollowsEndpointChange(t *testing.T) {
	e := newEnv(t)
	e.applyAndWait(t, allYAML(e.a.port))
	cc := e.newClient(t, "routes-and-follows")

	start := time.Now()
	waitReaches(t, cc, e.a.port)
	t.Logf("first RPC reached backend A after %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	before := e.metric(t, "legation_xds_convergence_seconds_count", `protocol="sotw",type="endpoint"`)
	e.apply(t, endpointsYAML(e.b.port))
	waitReaches(t, cc, e.b.port)
	t.Logf("RPCs reached backend B %s after the apply", time.Since(start).Round(time.Millisecond))
	// grpc-go ACKed the endpoint change: its commit-to-ACK time is in the
	// convergence histogram.
	waitFor(t, "the endpoint change's convergence observed", func() (bool, string) {
		n := e.metric(t, "legation_xds_convergence_seconds_count", `protocol="sotw",type="endpoint"`)
		return n > before, fmt.Sprintf("count %g, %g before the change", n, before)
	})

	// With the endpoint set replaced, nothing is left to pick A.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for i := range 20 {
		port, err := call(ctx, cc)
		if err != nil {
			t.Fatalf("RPC %d after the switch: %v", i, err)
		}
		if port != e.b.port {
			t.Fatalf("RPC %d after the switch answered by port %d, want backend B (%d)", i, port, e.b.port)
		}
	}
}

// TestGRPCXDSNackIsNotLooped: grpc-go NACKs a listener whose
// HttpConnectionManager runs a filter it does not implement (CORS). The
// replica counts the NACK once, shows it on /debug/streams, sends nothing
// more for listeners
// (promise 7: a NACK never loops), and the client keeps routing with the
// listener it had. A valid listener then clears the NACK.
func TestGRPCXDSNackIsNotLooped(t *testing.T) {
	const id = "nack-client"
	e := newEnv(t)
	e.applyAndWait(t, allYAML(e.a.port))
	cc := e.newClient(t, id)
	waitReaches(t, cc, e.a.port)
	waitFor(t, "listener ACKed", func() (bool, string) {
		st := e.stream(t, id)
		if st == nil || st.Types["listener"] == nil {
			return false, fmt.Sprintf("stream %+v", st)
		}
		ls := st.Types["listener"]
		return ls.VersionSent != "" && ls.VersionAcked == ls.VersionSent, fmt.Sprintf("%+v", *ls)
	})
	if got := e.metric(t, "legation_sotw_nacks_total", `type="listener"`); got != 0 {
		t.Fatalf("legation_sotw_nacks_total{type=listener} = %v before the bad listener, want 0", got)
	}
	before := e.metric(t, "legation_sotw_responses_total", `type="listener"`)

	// xdsadmin accepts it: Envoy has the CORS filter, grpc-go has not.
	badRev := e.apply(t, listenerYAML(false))
	waitFor(t, "legation_sotw_nacks_total{type=listener} = 1", func() (bool, string) {
		got := e.metric(t, "legation_sotw_nacks_total", `type="listener"`)
		return got == 1, fmt.Sprintf("%v", got)
	})
	// The bad listener went out once.
	responses := e.metric(t, "legation_sotw_responses_total", `type="listener"`)
	if responses != before+1 {
		t.Errorf("legation_sotw_responses_total{type=listener} went from %v to %v with the bad listener, want one response", before, responses)
	}

	// No resend loop: for testShortTimeout, not one more listener response,
	// not one more NACK, and RPCs keep flowing to A with the listener the
	// client had before.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rpcs := 0
	for end := time.Now().Add(testShortTimeout); time.Now().Before(end); {
		port, err := call(ctx, cc)
		if err != nil {
			t.Fatalf("RPC after the NACK: %v", err)
		}
		if port != e.a.port {
			t.Fatalf("RPC after the NACK answered by port %d, want backend A (%d)", port, e.a.port)
		}
		rpcs++
		if got := e.metric(t, "legation_sotw_responses_total", `type="listener"`); got != responses {
			t.Fatalf("legation_sotw_responses_total{type=listener} went from %v to %v after the NACK: resent", responses, got)
		}
		time.Sleep(50 * time.Millisecond) // pace the checks of what must not happen
	}
	if got := e.metric(t, "legation_sotw_nacks_total", `type="listener"`); got != 1 {
		t.Fatalf("legation_sotw_nacks_total{type=listener} = %v after %s, want still 1", got, testShortTimeout)
	}
	t.Logf("%d RPCs reached backend A during the %s after the NACK; listener responses stayed at %v", rpcs, testShortTimeout, responses)

	st := e.stream(t, id)
	if st == nil || st.Types["listener"] == nil {
		t.Fatalf("/debug/streams: no listener state for node %q: %+v", id, st)
	}
	ls := *st.Types["listener"]
	const wantMsg = `no filter implementation found for "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"` // grpc-go's words
	if !strings.Contains(ls.LastNack, wantMsg) {
		t.Errorf("/debug/streams listener last_nack = %q, want it to contain %q", ls.LastNack, wantMsg)
	}
	// The view's revision also moves when the replica writes status
	// records: the response is at the bad listener's revision or later.
	if sent, err := strconv.ParseInt(ls.VersionSent, 10, 64); err != nil || sent < badRev || ls.NackVersion != ls.VersionSent {
		t.Errorf("/debug/streams listener nack_version = %q, version_sent = %q: want both the same, at %d (the bad listener's revision) or later", ls.NackVersion, ls.VersionSent, badRev)
	}
	if ls.VersionAcked == ls.VersionSent {
		t.Errorf("/debug/streams listener version_acked = version_sent = %q after a NACK", ls.VersionAcked)
	}
	t.Logf("listener state after the NACK: %+v", ls)

	// The valid listener again: sent, ACKed, the NACK cleared.
	goodRev := e.apply(t, listenerYAML(true))
	waitFor(t, "listener ACKed again, NACK cleared", func() (bool, string) {
		st := e.stream(t, id)
		if st == nil || st.Types["listener"] == nil {
			return false, fmt.Sprintf("stream %+v", st)
		}
		ls := st.Types["listener"]
		sent, err := strconv.ParseInt(ls.VersionSent, 10, 64)
		ok := err == nil && sent >= goodRev && ls.VersionAcked == ls.VersionSent &&
			ls.LastNack == "" && ls.NackVersion == ""
		return ok, fmt.Sprintf("want sent and acked at %d or later, no NACK; have %+v", goodRev, *ls)
	})
	if got := e.metric(t, "legation_sotw_responses_total", `type="listener"`); got != responses+1 {
		t.Errorf("legation_sotw_responses_total{type=listener} = %v after the fix, want %v (one response)", got, responses+1)
	}
	if got := e.metric(t, "legation_sotw_nacks_total", `type="listener"`); got != 1 {
		t.Errorf("legation_sotw_nacks_total{type=listener} = %v after the fix, want still 1", got)
	}
	waitReaches(t, cc, e.a.port)
}

// TestGRPCXDSManyClients: 200 grpc-go xDS clients, each with its own node
// id and ADS stream on one replica, all route an RPC.
func TestGRPCXDSManyClients(t *testing.T) {
	const (
		clients  = 200
		parallel = 20
	)
	e := newEnv(t)
	rev := e.applyAndWait(t, allYAML(e.a.port))

	var (
		mu  sync.Mutex
		ccs []*grpc.ClientConn
	)
	t.Cleanup(func() {
		for _, cc := range ccs {
			cc.Close()
		}
	})
	// Made and routed concurrently, parallel at a time; every error is
	// kept, not just the first.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	sem := make(chan struct{}, parallel)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("many-%03d", i)
			cc, err := e.dial(id)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ccs = append(ccs, cc)
			mu.Unlock()
			if err := reaches(ctx, cc, e.a.port); err != nil {
				errs <- fmt.Errorf("client %s: %w", id, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if failed++; failed <= 5 {
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d clients did not route an RPC", failed, clients)
	}
	t.Logf("%d clients routed in %s", clients, time.Since(start).Round(time.Millisecond))

	// One stream per client, each with its own node id, every type ACKed
	// at the revision of the apply or later (the view's revision also moves
	// when the replica writes its status records).
	want := strconv.FormatInt(rev, 10)
	waitFor(t, "every client's stream ACKed all four types", func() (bool, string) {
		acked := map[string]bool{}
		var why string
		for _, st := range e.streams(t) {
			ok := len(st.Types) == 4
			for name, ts := range st.Types {
				if sent, err := strconv.ParseInt(ts.VersionSent, 10, 64); err != nil || sent < rev || ts.VersionAcked != ts.VersionSent {
					ok = false
					why = fmt.Sprintf("node %s %s: sent %q acked %q, want both at %s or later", st.NodeID, name, ts.VersionSent, ts.VersionAcked, want)
				}
			}
			if ok {
				acked[st.NodeID] = true
			}
		}
		for i := range clients {
			if id := fmt.Sprintf("many-%03d", i); !acked[id] {
				return false, fmt.Sprintf("%d of %d nodes; node %s is not; %s", len(acked), clients, id, why)
			}
		}
		return len(acked) == clients, fmt.Sprintf("%d streams ACKed, want %d", len(acked), clients)
	})
	if got := e.metric(t, "legation_sotw_streams", ""); got != clients {
		t.Errorf("legation_sotw_streams = %v, want %d", got, clients)
	}
}
