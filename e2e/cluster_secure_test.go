package e2e

// The whole deployment with TLS everywhere (localcluster's Config.Secure):
// etcd with client certificates and least-privilege roles, replicas
// serving xDS over mTLS and relaying to each other over mTLS, encrypted
// gossip, and clients through HAProxy over mTLS.

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/testkit/testcerts"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/localcluster"
)

// pemfileWatcher is the file watcher that grpc-go's "tls" channel
// credentials start and its xDS client does not stop when closed (grpc-go
// v1.85.0).
var pemfileWatcher = goleak.IgnoreAnyFunction("google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run")

// revokeBound is how soon a revoked identity's streams must end
// (docs/concepts/design.md, "Security").
const revokeBound = 10 * time.Second

// clientCreds are the TLS credentials of a load client or a grpc-go
// client. A nil *clientCreds is plaintext.
type clientCreds struct {
	tls                       *tls.Config // the raw clients'
	caFile, certFile, keyFile string      // grpc-go's bootstrap
}

// newClientCreds are the credentials of a client presenting f and
// trusting sec's CA.
func newClientCreds(t testing.TB, sec *localcluster.Security, f localcluster.CertFiles) *clientCreds {
	t.Helper()
	cfg, err := sec.TLS(f)
	if err != nil {
		t.Fatal(err)
	}
	return &clientCreds{tls: cfg, caFile: sec.CAFile, certFile: f.CertFile, keyFile: f.KeyFile}
}

// transport is the gRPC transport credentials of c.
func (c *clientCreds) transport() credentials.TransportCredentials {
	if c == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(c.tls)
}

// channelCreds is the bootstrap's channel_creds entry of c.
func (c *clientCreds) channelCreds() map[string]any {
	if c == nil {
		return map[string]any{"type": "insecure"}
	}
	return map[string]any{"type": "tls", "config": map[string]any{
		"ca_certificate_file": c.caFile,
		"certificate_file":    c.certFile,
		"private_key_file":    c.keyFile,
	}}
}

// The identities the secure test adds to localcluster's.
const (
	// narrowID may claim nodes narrow-* of group c1 only.
	narrowID = "spiffe://legation.test/narrow"
	// revokedID may claim nodes rev-*, until it is revoked.
	revokedID = "spiffe://legation.test/revoked"
)

// TestClusterSecure: 3 etcd members, 3 replicas and HAProxy, secure end
// to end. Clients over mTLS through HAProxy (raw SotW and delta, grpc-go
// with TLS channel credentials) are each served by their home only.
// A client sending the relay marker and a forwarded identity itself is
// treated as any client: relayed to its home, judged by its own
// certificate. Revoking an identity ends its streams, on every replica,
// within 10s, and no other's. A replica with the cluster's certificates
// but no gossip key, or a wrong one, never enters any replica's ring. A
// killed replica's clients are re-homed and served within failoverBound.
//
// It catches a secure deployment that does not hold together (a
// certificate naming the wrong address, a replica refusing its peers'
// relayed streams, etcd roles too narrow for a replica), relay markers
// trusted from clients, a revoke that reaches some replicas only, and a
// gossip ring open to a host without the key.
func TestClusterSecure(t *testing.T) {
	checkLeaks(t, pemfileWatcher)
	begin := time.Now()
	cfg := clusterConfig(clusterFlags)
	cfg.Secure = true
	c, f, rev := startFleetCluster(t, cfg, "sec", secureMix)
	sec := c.Security()
	want := f.expect(rev, rev)
	adminOK(t, c, "authz", "grant", narrowID, "--nodes", "narrow-*", "--groups", "c1")
	adminOK(t, c, "authz", "grant", revokedID, "--nodes", "rev-*", "--groups", "*")

	views, err := readDebug(c)
	if err != nil {
		t.Fatal(err)
	}
	hc := checkHomes(c, views, want)
	if !hc.ringsAgree || len(hc.bad) > 0 {
		t.Fatalf("%d nodes not on their homes (rings agree: %t); e.g. %s", len(hc.bad), hc.ringsAgree, example(hc.bad))
	}
	var per []string
	for _, name := range runningNames(c) {
		per = append(per, fmt.Sprintf("%s %d", name, hc.perReplica[name]))
	}
	t.Logf("affinity over mTLS: %d nodes each served by its home only (%s), %s after the start",
		len(want), strings.Join(per, ", "), time.Since(begin).Round(time.Millisecond))

	checkSpoofedMarker(t, c, sec)
	checkRevoke(t, c, sec, f, rev)
	checkGossipKey(t, c)

	victim, held := busiest(t, c, want)
	name := c.Replicas()[victim].Name
	kill := time.Now()
	c.KillReplica(victim)
	h := waitHomed(t, c, f, want, kill, clusterTimeout)
	if h.All > failoverBound {
		t.Errorf("re-homing took %s after the kill, want <= %s (docs/concepts/design.md, failover target)", h.All.Round(time.Millisecond), failoverBound)
	}
	failed, ok, ex, gap := f.rpcStats(kill, time.Now())
	t.Logf("killed %s (home of %d of %d nodes): every node settled on its new home, over mTLS, %s after the kill; "+
		"grpc-go RPCs meanwhile: %d answered, %d failed (%s), longest gap %s",
		name, held, len(want), h.All.Round(time.Millisecond), ok, failed, ex, gap.Round(time.Millisecond))
	f.checkHistories(t)
	t.Logf("TestClusterSecure took %s", time.Since(begin).Round(time.Millisecond))
}

// checkSpoofedMarker: a client with narrowID's certificate that sends,
// itself, the relay marker and a forwarded identity (the admin's, or the
// client identity that may claim anything) straight to a replica is
// treated as any client. Its stream for its own node, homed elsewhere,
// is relayed to the home and served there; a node outside narrow-* is
// refused, served at the replica it reached or relayed; CSDS refuses it.
func checkSpoofedMarker(t *testing.T, c *localcluster.TestCluster, sec *localcluster.Security) {
	t.Helper()
	narrow, err := sec.Issue("narrow", testcerts.Options{URIs: []string{narrowID}})
	if err != nil {
		t.Fatal(err)
	}
	narrowTLS := newClientCreds(t, sec, narrow).tls
	landing := c.Replicas()[0]
	home := ringHome(runningNames(c))
	pick := func(prefix string, at bool) string {
		for i := 0; ; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if (home(id) == landing.Name) == at {
				return id
			}
		}
	}
	untrustedBefore := clusterMetric(t, c, landing.HTTPAddr, "legation_relay_untrusted_markers_total")
	spoofed := func(identity string) *grpc.ClientConn {
		md := metadata.Pairs(relay.MarkerKey, c.Replicas()[1].Name, access.IdentityKey, identity, access.LoopbackKey, "1")
		return xdstest.DialTLS(t, landing.XDSAddr, narrowTLS,
			grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(metadata.NewOutgoingContext(ctx, md), desc, cc, method, opts...)
			}),
			grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(metadata.NewOutgoingContext(ctx, md), method, req, reply, cc, opts...)
			}))
	}
	asAdmin, asClient := spoofed(localcluster.AdminIdentity), spoofed(localcluster.ClientIdentity)

	// Its own node, homed on another replica: relayed there, served there.
	own := pick("narrow", false)
	waitFor(t, own+" served with a spoofed marker", func() (bool, string) {
		s := xdstest.OpenSotW(t, asAdmin)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(own, "c1"), TypeUrl: cdsURL})
		select {
		case r := <-s.Recv():
			if r.Err != nil {
				return false, r.Err.Error() // the rule may not be loaded yet
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s: no response nor end", own)
		}
		return true, ""
	})
	waitFor(t, own+" served by its home "+home(own)+", relayed by "+landing.Name, func() (bool, string) {
		views, err := readDebug(c)
		if err != nil {
			return false, err.Error()
		}
		ss := localStreams(views)[own]
		if len(ss) != 1 || ss[0].Replica != home(own) {
			var where []string
			for _, s := range ss {
				where = append(where, s.Replica)
			}
			return false, fmt.Sprintf("served locally by %v", where)
		}
		for _, v := range views {
			if v.Name != landing.Name {
				continue
			}
			for _, r := range v.Relay {
				if r.NodeID == own && r.ServedBy == home(own) {
					return true, ""
				}
			}
		}
		return false, landing.Name + "'s relay registry does not list it relayed to " + home(own)
	})

	// Nodes it may not claim, though it says it is the client identity
	// that may claim anything: one homed where it landed, one elsewhere.
	for _, id := range []string{pick("other", true), pick("other", false)} {
		for who, cc := range map[string]*grpc.ClientConn{"admin": asAdmin, "client": asClient} {
			s := xdstest.OpenSotW(t, cc)
			s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: cdsURL})
			firstResult(t, fmt.Sprintf("%s (home %s) claimed on %s, forwarded identity the %s's", id, home(id), landing.Name, who),
				s.Recv(), codes.PermissionDenied)
		}
	}
	// CSDS answers admins: not a client that says it relays one.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := statusv3.NewClientStatusDiscoveryServiceClient(asAdmin).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("CSDS with a spoofed admin identity: %v, want PERMISSION_DENIED", err)
	}
	realAdmin := xdstest.DialTLS(t, landing.XDSAddr, sec.AdminTLS())
	if _, err := statusv3.NewClientStatusDiscoveryServiceClient(realAdmin).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{}); err != nil {
		t.Errorf("CSDS with the admin's certificate: %v, want OK", err)
	}
	t.Logf("spoofed relay markers on %s (%v untrusted markers counted): %s relayed to its home %s and served there; "+
		"other nodes refused whatever identity was forwarded; CSDS refused",
		landing.Name, clusterMetric(t, c, landing.HTTPAddr, "legation_relay_untrusted_markers_total")-untrustedBefore, own, home(own))
}

// checkRevoke: clients of revokedID, two homed on each replica, are
// served; `xdsadmin authz revoke` ends every one of their streams with
// PERMISSION_DENIED within revokeBound, and none of f's.
func checkRevoke(t *testing.T, c *localcluster.TestCluster, sec *localcluster.Security, f *fleet, rev int64) {
	t.Helper()
	cert, err := sec.Issue("revoked", testcerts.Options{URIs: []string{revokedID}})
	if err != nil {
		t.Fatal(err)
	}
	creds := newClientCreds(t, sec, cert)
	home := ringHome(runningNames(c))
	homed := map[string]int{}
	victims := &fleet{}
	t.Cleanup(victims.close)
	for i := 0; len(victims.raw) < 2*len(runningNames(c)); i++ {
		id := fmt.Sprintf("rev-%03d", i)
		if homed[home(id)] == 2 {
			continue
		}
		// One SotW and one delta client homed on each replica.
		kind := loadKind(homed[home(id)])
		homed[home(id)]++
		cl, err := newLoadClientWith(id, kind, c.LBAddr, nil, creds)
		if err != nil {
			t.Fatal(err)
		}
		cl.start()
		victims.raw = append(victims.raw, cl)
	}
	victims.waitSynced(t, 1, rev)
	waitHomed(t, c, victims, victims.expect(rev, rev), time.Now(), clusterTimeout)

	revoke := time.Now()
	adminOK(t, c, "authz", "revoke", revokedID)
	var worst time.Duration
	perReplica := map[string]time.Duration{}
	for _, cl := range victims.raw {
		var s streamRec
		waitFor(t, cl.String()+"'s stream ended after the revoke", func() (bool, string) {
			s = cl.streamsCopy()[0]
			return !s.Ended.IsZero(), "open"
		})
		took := s.Ended.Sub(revoke)
		worst = max(worst, took)
		perReplica[home(cl.id)] = max(perReplica[home(cl.id)], took)
		if status.Code(s.Err) != codes.PermissionDenied {
			t.Errorf("%s (home %s): stream ended with %v after the revoke, want PERMISSION_DENIED", cl, home(cl.id), s.Err)
		}
		if took > revokeBound {
			t.Errorf("%s (home %s): stream ended %s after the revoke, want <= %s", cl, home(cl.id), took.Round(time.Millisecond), revokeBound)
		}
	}
	for _, cl := range f.raw {
		if ends := cl.endsSince(revoke); len(ends) > 0 {
			t.Errorf("%s (not revoked): stream ended after the revoke: %v", cl, ends[0].Err)
		}
	}
	var per []string
	for _, n := range slices.Sorted(maps.Keys(perReplica)) {
		per = append(per, fmt.Sprintf("%s %s", n, perReplica[n].Round(time.Millisecond)))
	}
	t.Logf("revoked %s: its %d streams ended PERMISSION_DENIED within %s (slowest per home replica: %s); none of the other identity's %d",
		revokedID, len(victims.raw), worst.Round(time.Millisecond), strings.Join(per, ", "), len(f.raw))
	victims.close()
}

// checkGossipKey: two replicas with the cluster's certificates and etcd
// credentials, one without --gossip-key-file and one with a key of its
// own, kept out of HAProxy, are ready (they read etcd) but in no
// replica's ring, polled for a while; then they are killed.
func checkGossipKey(t *testing.T, c *localcluster.TestCluster) {
	t.Helper()
	keyed := runningNames(c)
	wrong := filepath.Join(t.TempDir(), "wrong.keys")
	if err := os.WriteFile(wrong, []byte(base64.StdEncoding.EncodeToString([]byte("a wrong key, but 32 bytes long!!"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withKey := func(file string) func([]string) []string {
		return func(args []string) []string {
			i := slices.Index(args, "--gossip-key-file")
			if file == "" {
				return slices.Delete(args, i, i+2)
			}
			args[i+1] = file
			return args
		}
	}
	added := time.Now()
	var rogues []int
	for _, file := range []string{"", wrong} {
		rogues = append(rogues, c.AddReplicaWith(localcluster.ReplicaOptions{Apart: true, Args: withKey(file)}))
	}
	names := map[string]string{}
	for i, r := range rogues {
		names[c.Replicas()[r].Name] = []string{"no gossip key", "a wrong gossip key"}[i]
	}
	t.Logf("started %d replicas apart (%v), ready in %s", len(rogues), names, time.Since(added).Round(time.Millisecond))
	polls := 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range c.Replicas() {
			if !slices.Contains(keyed, r.Name) {
				continue
			}
			ring, members := clusterOf(t, c, r)
			for _, m := range slices.Concat(ring, members) {
				if why, ok := names[m]; ok {
					t.Fatalf("%s's ring or members hold %s, a replica with %s, %s after it started: ring %v, members %v",
						r.Name, m, why, time.Since(added).Round(time.Millisecond), ring, members)
				}
			}
			polls++
		}
		time.Sleep(100 * time.Millisecond)
	}
	// They are listed in etcd's registry, where the others look for
	// peers, and still run: kept out by the key alone.
	out, _, _ := clusterAdmin(c, "", "members")
	var seen []string
	for _, i := range rogues {
		r := c.Replicas()[i]
		if !r.Running() {
			t.Fatalf("%s (%s) exited: %s", r.Name, names[r.Name], r.Log)
		}
		if !strings.Contains(out, r.Name) {
			t.Errorf("xdsadmin members does not list %s:\n%s", r.Name, out)
		}
		ring, _ := clusterOf(t, c, r)
		seen = append(seen, fmt.Sprintf("%s's own ring %v", r.Name, ring))
	}
	t.Logf("no replica's ring or members held them over %s after they started (%d polls of /debug/cluster), "+
		"though the etcd registry lists them; %s", time.Since(added).Round(time.Millisecond), polls, strings.Join(seen, ", "))
	for _, r := range rogues {
		c.KillReplica(r)
	}
}

// clusterOf is the ring and the members' names that replica r reports
// (/debug/cluster).
func clusterOf(t *testing.T, c *localcluster.TestCluster, r localcluster.Replica) (ring, members []string) {
	t.Helper()
	var cl struct {
		Ring    []string `json:"ring"`
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := clusterJSON(c, r.HTTPAddr, "/debug/cluster", &cl); err != nil {
		t.Fatalf("%s: %v", r.Name, err)
	}
	for _, m := range cl.Members {
		members = append(members, m.Name)
	}
	return cl.Ring, members
}

// adminOK runs xdsadmin against c's etcd and fails the test unless it
// succeeds.
func adminOK(t *testing.T, c *localcluster.TestCluster, args ...string) {
	t.Helper()
	if out, errOut, code := clusterAdmin(c, "", args...); code != 0 {
		t.Fatalf("xdsadmin %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
}

// clusterMetric is metricAt for a replica of c, over HTTPS when c is
// secure.
func clusterMetric(t *testing.T, c *localcluster.TestCluster, addr, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	code, body, err := c.Cluster().HTTPGet(ctx, addr, "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return metricIn(body, name, "")
}
