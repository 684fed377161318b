package access_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

const (
	replicaID = "spiffe://legation.test/replica"
	edgeID    = "spiffe://legation.test/ns/edge/sa/envoy"
	adminID   = "spiffe://legation.test/admin"
)

var (
	loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
	remote   = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000}
)

// certs issues one verified certificate per identity.
func certs(t *testing.T) map[string]*x509.Certificate {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*x509.Certificate{}
	for i, id := range []string{replicaID, edgeID, adminID} {
		c, err := ca.Issue(dir, string(rune('a'+i)), testcerts.Options{URIs: []string{id}})
		if err != nil {
			t.Fatal(err)
		}
		out[id] = c.Cert
	}
	return out
}

// streamCtx is the context of a stream from addr presenting leaf (none
// if nil), with metadata kv.
func streamCtx(addr net.Addr, leaf *x509.Certificate, kv ...string) context.Context {
	p := &peer.Peer{Addr: addr}
	if leaf != nil {
		p.AuthInfo = credentials.TLSInfo{State: tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{leaf},
			VerifiedChains:   [][]*x509.Certificate{{leaf}},
		}}
	}
	ctx := peer.NewContext(context.Background(), p)
	if len(kv) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	return ctx
}

func mtlsGuard(t *testing.T) *access.Guard {
	t.Helper()
	table, err := authz.NewTable([]authz.Rule{
		{Identity: edgeID, Nodes: []string{"edge-*"}, Groups: []string{"c1"}},
		{Identity: adminID, Admin: true},
	}, authz.Options{})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{})
	g, err := access.New(access.Config{
		MTLS:    true,
		Rules:   func() (access.Table, <-chan struct{}) { return table, changed },
		Replica: func(id string) bool { return id == replicaID },
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func node(id string) *corev3.Node { return &corev3.Node{Id: id} }

// TestMTLSClaims: with mTLS the identity of the verified certificate
// decides; no certificate is UNAUTHENTICATED.
func TestMTLSClaims(t *testing.T) {
	c := certs(t)
	g := mtlsGuard(t)
	tests := []struct {
		name  string
		ctx   context.Context
		node  string
		group string
		want  codes.Code
	}{
		{"own node and group", streamCtx(remote, c[edgeID]), "edge-1", "c1", codes.OK},
		{"own node, no group", streamCtx(remote, c[edgeID]), "edge-1", "", codes.OK},
		{"another node", streamCtx(remote, c[edgeID]), "other-1", "c1", codes.PermissionDenied},
		{"another group", streamCtx(remote, c[edgeID]), "edge-1", "c2", codes.PermissionDenied},
		{"no certificate", streamCtx(loopback, nil), "edge-1", "c1", codes.Unauthenticated},
		{"no rule", streamCtx(remote, c[replicaID]), "edge-1", "", codes.PermissionDenied},
	}
	for _, tc := range tests {
		recheck, err := g.Authorize(tc.ctx, node(tc.node), tc.group)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
		if err == nil && recheck == nil {
			t.Errorf("%s: allowed without a channel to recheck on", tc.name)
		}
	}
	if err := g.Secrets(streamCtx(remote, c[edgeID]), "c1"); err != nil {
		t.Errorf("secrets to an authenticated client: %v", err)
	}
	if err := g.Secrets(streamCtx(loopback, nil), ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("secrets without a certificate, even on loopback, with mTLS: %v, want PERMISSION_DENIED", err)
	}
	if err := g.Admin(streamCtx(remote, c[adminID])); err != nil {
		t.Errorf("admin: %v", err)
	}
	if err := g.Admin(streamCtx(loopback, c[edgeID])); status.Code(err) != codes.PermissionDenied {
		t.Errorf("edge as admin: %v, want PERMISSION_DENIED", err)
	}
}

// TestRelayMarkerTrust: a relay marker and a forwarded identity count only
// from a peer presenting a replica's identity; from a client they are
// ignored: its identity stays its certificate's.
func TestRelayMarkerTrust(t *testing.T) {
	c := certs(t)
	g := mtlsGuard(t)
	forged := streamCtx(remote, c[edgeID], "x-legation-relayed", "replica-1", access.IdentityKey, adminID, access.LoopbackKey, "1")
	if g.TrustRelay(forged) {
		t.Error("a client's own relay marker is trusted")
	}
	if id := g.Of(forged); id.Name != edgeID || id.RelayedBy != "" || id.Loopback {
		t.Errorf("identity of a client forging the marker: %+v, want its own (%s, remote)", id, edgeID)
	}
	if err := g.Admin(forged); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a client forging an admin identity: %v, want PERMISSION_DENIED", err)
	}

	relayed := streamCtx(loopback, c[replicaID], "x-legation-relayed", "replica-1", access.IdentityKey, edgeID, access.LoopbackKey, "1")
	if !g.TrustRelay(relayed) {
		t.Error("a replica's relay marker is not trusted")
	}
	if id := g.Of(relayed); id.Name != edgeID || id.RelayedBy != replicaID || !id.Loopback {
		t.Errorf("identity of a relayed stream: %+v, want %s relayed by %s, loopback", id, edgeID, replicaID)
	}
	if _, err := g.Authorize(relayed, node("edge-1"), "c1"); err != nil {
		t.Errorf("relayed edge claiming edge-1: %v", err)
	}
	// Forwarded from a replica that is not on loopback: not loopback.
	if id := g.Of(streamCtx(remote, c[replicaID], "x-legation-relayed", "r", access.LoopbackKey, "1")); id.Loopback {
		t.Error("a stream relayed by a remote replica counts as loopback")
	}
	// The metadata a replica forwards carries the client's identity.
	md := g.Forward(streamCtx(loopback, c[edgeID]))
	if v := md.Get(access.IdentityKey); len(v) != 1 || v[0] != edgeID || len(md.Get(access.LoopbackKey)) != 1 {
		t.Errorf("Forward: %v, want %s and loopback", md, edgeID)
	}
}

// TestPlaintextSecretsOff: without mTLS and without
// --insecure-loopback-secrets, secrets go to no one, loopback clients
// included, and the refusal names the flag.
func TestPlaintextSecretsOff(t *testing.T) {
	g, err := access.New(access.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, ctx := range map[string]context.Context{
		"loopback": streamCtx(loopback, nil),
		"remote":   streamCtx(remote, nil),
		"relayed from loopback by a loopback replica": streamCtx(loopback, nil, "x-legation-relayed", "r", access.LoopbackKey, "1"),
	} {
		err := g.Secrets(ctx, "")
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--insecure-loopback-secrets") {
			t.Errorf("secrets to a %s client: %v, want PERMISSION_DENIED naming --insecure-loopback-secrets", name, err)
		}
	}
}

// TestPlaintext: without mTLS every claim is allowed, secrets go to
// loopback clients only with InsecureLoopbackSecrets (also when relayed
// from loopback by a loopback replica), and markers are trusted only from
// a registered replica's address (here 127.0.0.1).
func TestPlaintext(t *testing.T) {
	g, err := access.New(access.Config{
		InsecureLoopbackSecrets: true,
		ReplicaAddr:             func(ip netip.Addr) bool { return ip == netip.MustParseAddr("127.0.0.1") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Authorize(streamCtx(remote, nil), node("anything"), "any"); err != nil {
		t.Errorf("plaintext claim: %v", err)
	}
	if err := g.Secrets(streamCtx(loopback, nil), ""); err != nil {
		t.Errorf("secrets to loopback: %v", err)
	}
	if err := g.Secrets(streamCtx(remote, nil), ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("secrets to a remote client: %v, want PERMISSION_DENIED", err)
	}
	relayedRemote := streamCtx(loopback, nil, "x-legation-relayed", "r")
	if err := g.Secrets(relayedRemote, ""); status.Code(err) != codes.PermissionDenied {
		t.Errorf("secrets to a remote client relayed by a loopback replica: %v, want PERMISSION_DENIED", err)
	}
	if err := g.Secrets(streamCtx(loopback, nil, "x-legation-relayed", "r", access.LoopbackKey, "1"), ""); err != nil {
		t.Errorf("secrets to a loopback client relayed by a loopback replica: %v", err)
	}
	if !g.TrustRelay(streamCtx(loopback, nil, "x-legation-relayed", "r")) {
		t.Error("plaintext: marker from a replica's address not trusted")
	}
	fromRemote := streamCtx(remote, nil, "x-legation-relayed", "r", access.IdentityKey, "spiffe://x/admin")
	if g.TrustRelay(fromRemote) {
		t.Error("plaintext: marker from an address no replica is registered at is trusted")
	}
	if id := g.Of(fromRemote); id.Name != "" || id.RelayedBy != "" {
		t.Errorf("plaintext: a marker from a non-replica address forwarded %+v", id)
	}
}

// TestRulesNotLoaded: until the rules are loaded a claim waits, then
// fails UNAVAILABLE.
func TestRulesNotLoaded(t *testing.T) {
	c := certs(t)
	g, err := access.New(access.Config{
		MTLS:         true,
		Rules:        func() (access.Table, <-chan struct{}) { return &authz.Table{}, nil },
		RulesReady:   make(chan struct{}),
		ReadyTimeout: 50 * time.Millisecond,
		Replica:      func(string) bool { return false },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Authorize(streamCtx(remote, c[edgeID]), node("edge-1"), ""); status.Code(err) != codes.Unavailable {
		t.Errorf("before the rules are loaded: %v, want UNAVAILABLE", err)
	}
}
