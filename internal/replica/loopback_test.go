package replica_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretv3 "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestPlaintextLoopbackIsNotAnIdentity: a plaintext replica refuses a
// client on 127.0.0.1 a secret (gRPC SDS and REST-JSON :secrets),
// /debug/ and /debug/pprof/, naming the flag that would allow it; with
// --insecure-loopback-secrets, --insecure-loopback-debug and --pprof the
// same client gets them, and each flag is logged at Warn at start.
func TestPlaintextLoopbackIsNotAnIdentity(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Secret, store.DefaultScope, &tlsv3.Secret{Name: "edge-cert"})})
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("flags %v", on), func(t *testing.T) {
			cfg := e.config(t)
			cfg.InsecureLoopbackSecrets, cfg.InsecureLoopbackDebug, cfg.Pprof = on, on, on
			logs := new(testbase.LockedBuffer)
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			r := start(t, cfg)
			waitReady(t, r)
			for _, flag := range []string{"--insecure-loopback-secrets", "--insecure-loopback-debug", "--pprof"} {
				warned := strings.Contains(logs.String(), "level=WARN msg=\"INSECURE: "+flag) ||
					strings.Contains(logs.String(), "level=WARN msg=\""+flag)
				if warned != on {
					t.Errorf("a Warn at start naming %s: %v, want %v\n%s", flag, warned, on, logs.String())
				}
			}

			err := sdsFetch(t, r)
			switch {
			case on && err != nil:
				t.Errorf("SDS with --insecure-loopback-secrets: %v, want the secret", err)
			case !on && (grpcstatus.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--insecure-loopback-secrets")):
				t.Errorf("SDS without --insecure-loopback-secrets: %v, want PERMISSION_DENIED naming the flag", err)
			}

			req := &discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), ResourceNames: []string{"edge-cert"}}
			code, resp, body := fetchREST(t, r, "/v3/discovery:secrets", req)
			switch {
			case on && (code != http.StatusOK || len(resp.GetResources()) != 1):
				t.Errorf("REST :secrets with --insecure-loopback-secrets: %d %s, want 200 with the secret", code, body)
			case !on && (code != http.StatusForbidden || !strings.Contains(body, "--insecure-loopback-secrets")):
				t.Errorf("REST :secrets without --insecure-loopback-secrets: %d %s, want 403 naming the flag", code, body)
			}

			for path, flag := range map[string]string{"/debug/pprof/goroutine?debug=1": "--pprof", "/debug/view": "--insecure-loopback-debug"} {
				code, body := get(t, r, path)
				switch {
				case on && code != http.StatusOK:
					t.Errorf("GET %s with the flags: %d %s, want 200", path, code, body)
				case !on && (code < 400 || !strings.Contains(body, flag)):
					t.Errorf("GET %s without the flags: %d %s, want a refusal naming %s", path, code, body, flag)
				}
			}
			r.stop(t)
		})
	}
}

// sdsFetch opens an SDS stream to r from 127.0.0.1, asks for edge-cert
// and returns the first response's error (nil: the secret came).
func sdsFetch(t *testing.T, r *running) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := secretv3.NewSecretDiscoveryServiceClient(dial(t, r)).StreamSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Secret.URL, ResourceNames: []string{"edge-cert"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err == nil && len(resp.GetResources()) != 1 {
		return fmt.Errorf("got %d resources, want the secret", len(resp.GetResources()))
	}
	return err
}
