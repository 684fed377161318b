//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestRapidReset100k (make e2e; internal/replica's TestRapidReset is the
// make test size): one connection opening and resetting 100,000 ADS
// streams leaves the replica up, its RSS less than 100 MiB higher, and
// another client still pushed to within a second.
func TestRapidReset100k(t *testing.T) {
	const resets = 100_000
	e := newEnv(t)
	watcher := xdstest.OpenSotW(t, xdstest.Dial(t, e.node.XDSAddr()))
	watcher.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("watcher", "c1"), TypeUrl: resource.Cluster.URL})
	watcher.Ack(watcher.Expect())

	before := rss(t)
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(xdstest.Dial(t, e.node.XDSAddr()))
	req := &discoveryv3.DiscoveryRequest{Node: xdstest.Node("resetter", "c1"), TypeUrl: resource.Cluster.URL}
	start := time.Now()
	for range resets {
		ctx, cancel := context.WithCancel(context.Background())
		if st, err := ads.StreamAggregatedResources(ctx); err == nil {
			st.Send(req) //nolint:errcheck // cancelled anyway
		}
		cancel()
	}
	after := rss(t)
	t.Logf("%d streams opened and reset in %s: RSS %d MiB -> %d MiB", resets, time.Since(start).Round(time.Millisecond), before>>20, after>>20)
	if after-before > 100<<20 {
		t.Errorf("RSS grew %d MiB, want under 100", (after-before)>>20)
	}
	pushed := time.Now()
	e.apply(t, clusterBYAML)
	watcher.Expect()
	if d := time.Since(pushed); d > time.Second {
		t.Errorf("the other client was pushed to %s after the apply, want under 1s", d)
	}
}

// rss is this process's resident set (the replica runs in it), in bytes.
func rss(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatalf("reading the RSS: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
