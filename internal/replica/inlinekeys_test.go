package replica_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/netnstest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestInlineKeyListener: a listener carrying an inline private key
// (written as xdsadmin apply --allow-inline-keys writes it) is not sent to
// a plaintext client on another host, which may not be sent secrets:
// neither on an ADS stream nor in a REST-JSON poll, both answered with the
// other listener alone. A client with a certificate, over mTLS, which may
// be sent its scope's secrets, gets it.
func TestInlineKeyListener(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Listener, store.DefaultScope, xdstest.APIListener(t, "plain", "r", true)),
		xdstest.Put(t, resource.Listener, store.DefaultScope, xdstest.KeyedListener(t, "tls", "r")),
	})
	lds := &discoveryv3.DiscoveryRequest{Node: xdstest.Node("edge-1", "c1"), TypeUrl: resource.Listener.URL}

	ns := netnstest.New(t)
	cfg := e.config(t)
	cfg.XDSAddr = netip.AddrPortFrom(ns.HostIP(), 0).String()
	cfg.HTTPAddr = netip.AddrPortFrom(ns.HostIP(), 0).String()
	plain := start(t, cfg) // loads the view after the apply
	waitReady(t, plain)
	conn, err := grpc.NewClient("passthrough:///"+plain.XDSAddr(), grpc.WithContextDialer(ns.GRPCDialer()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	remote := xdstest.OpenSotW(t, conn)
	remote.Send(lds)
	if got := xdstest.Names(t, remote.ExpectType(resource.Listener)); !slices.Equal(got, []string{"plain"}) {
		t.Errorf("plaintext client on another host, ADS: got listeners %v, want [plain]", got)
	}
	if got := remoteREST(t, ns, plain, lds); !slices.Equal(got, []string{"plain"}) {
		t.Errorf("plaintext client on another host, REST-JSON: got listeners %v, want [plain]", got)
	}
	if got := metricValue(t, cfg.Registerer, "legation_sotw_inline_keys_withheld_total", "type", "listener"); got < 2 {
		t.Errorf("legation_sotw_inline_keys_withheld_total{type=listener} = %v, want at least 2", got)
	}

	k := newMTLSKit(t)
	k.grant(t, e)
	mcfg := e.config(t)
	k.configure(&mcfg)
	mtls := start(t, mcfg)
	k.waitReady(t, mtls)
	s := xdstest.OpenSotW(t, xdstest.DialTLS(t, mtls.XDSAddr(), k.tls(t, mtlsEdgeID)))
	s.Send(lds)
	if got := xdstest.Names(t, s.ExpectType(resource.Listener)); !slices.Equal(got, []string{"plain", "tls"}) {
		t.Errorf("mTLS client allowed secrets: got listeners %v, want [plain tls]", got)
	}
}

// remoteREST polls r's REST-JSON listeners from inside ns and returns the
// names of the listeners answered.
func remoteREST(t *testing.T, ns *netnstest.NS, r *running, req *discoveryv3.DiscoveryRequest) []string {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hreq, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+r.HTTPAddr()+"/v3/discovery:listeners", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ns.HTTPClient().Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("REST-JSON poll: %d %s %v", resp.StatusCode, out, err)
	}
	var dr struct {
		Resources []struct {
			Name string `json:"name"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(out, &dr); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range dr.Resources {
		names = append(names, x.Name)
	}
	return names
}
