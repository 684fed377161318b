package store_test

import (
	"errors"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

func TestDecodeValue(t *testing.T) {
	cluster := func(name string) []byte { return envelope(t, &clusterv3.Cluster{Name: name}) }
	badBody, err := proto.Marshal(&legationv1.Envelope{Body: &anypb.Any{TypeUrl: resource.Cluster.URL, Value: []byte("\xff\xff")}})
	if err != nil {
		t.Fatal(err)
	}
	full, err := proto.Marshal(&legationv1.Envelope{
		Body:      body(t, resource.Cluster, "a", 1, 0),
		Ttl:       durationpb.New(30e9),
		WrittenBy: "someone",
		Labels:    map[string]string{"team": "edge"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const m = "store: malformed value: "
	for _, tc := range []struct {
		name    string
		path    string
		value   []byte
		wantKey store.Key
		wantErr string // a prefix of the error; "" for none
	}{
		{"valid", "cluster/default/a", cluster("a"), key(resource.Cluster, "default", "a"), ""},
		{"every field", "cluster/default/a", full, key(resource.Cluster, "default", "a"), ""},
		{"name with slashes", "cluster/edge/a/b/c", cluster("a/b/c"), key(resource.Cluster, "edge", "a/b/c"), ""},
		{"no scope", "cluster", cluster("a"), store.Key{}, m + `key "cluster" has no scope`},
		{"no name", "cluster/default", cluster("a"), store.Key{}, m + `key "cluster/default" has no name`},
		{"empty name", "cluster/default/", cluster(""), store.Key{}, m + `key "cluster/default/" has no name`},
		{"empty scope", "cluster//a", cluster("a"), store.Key{}, m + `key "cluster//a": empty scope`},
		{"bad scope", "cluster/a b/a", cluster("a"), store.Key{}, m + `key "cluster/a b/a": scope "a b" holds ' '`},
		{"unknown type", "nosuch/default/a", cluster("a"), store.Key{}, m + `key "nosuch/default/a" names unknown type "nosuch"`},
		{"alias as type", "clusters/default/a", cluster("a"), store.Key{}, m + `key "clusters/default/a" names unknown type "clusters"`},
		{"capitalised type", "Cluster/default/a", cluster("a"), store.Key{}, m + `key "Cluster/default/a" names unknown type "Cluster"`},
		{"garbage", "cluster/default/a", []byte("\xff\xfe\x00garbage"), key(resource.Cluster, "default", "a"), m + "cluster/default/a: envelope: "},
		{"empty value", "cluster/default/a", nil, key(resource.Cluster, "default", "a"), m + "cluster/default/a: envelope has no body"},
		{"no body", "cluster/default/a", envelope(t, nil), key(resource.Cluster, "default", "a"), m + "cluster/default/a: envelope has no body"},
		{"body of another type", "cluster/default/a", envelope(t, &listenerv3.Listener{Name: "a"}), key(resource.Cluster, "default", "a"),
			m + `cluster/default/a: body is "type.googleapis.com/envoy.config.listener.v3.Listener", want "type.googleapis.com/envoy.config.cluster.v3.Cluster"`},
		{"body naming another resource", "cluster/default/a", cluster("b"), key(resource.Cluster, "default", "a"), m + `cluster/default/a: body names "b"`},
		{"body that does not decode", "cluster/default/a", badBody, key(resource.Cluster, "default", "a"), m + "cluster/default/a: decode cluster: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, env, err := store.DecodeValue(tc.path, tc.value)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("DecodeValue: %v", err)
				}
				if env == nil {
					t.Fatal("no envelope")
				}
				var want legationv1.Envelope
				if err := proto.Unmarshal(tc.value, &want); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(&want, env, protocmp.Transform()); diff != "" {
					t.Errorf("envelope differs (-want +got):\n%s", diff)
				}
			} else {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeValue: %v, want an error starting %q", err, tc.wantErr)
				}
				if !errors.Is(err, store.ErrMalformed) {
					t.Errorf("error %v does not wrap ErrMalformed", err)
				}
				if env != nil {
					t.Errorf("an envelope with an error: %v", env)
				}
			}
			if diff := cmp.Diff(tc.wantKey, k, sameType); diff != "" {
				t.Errorf("key differs (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeValue feeds DecodeValue what another tool may have written in
// etcd: it must never panic, and a value it accepts holds a resource of the
// key's type and name.
func FuzzDecodeValue(f *testing.F) {
	valid := envelope(f, &clusterv3.Cluster{Name: "a"})
	withTTL, err := proto.Marshal(&legationv1.Envelope{
		Body:      body(f, resource.Cluster, "a", 1, 0),
		Ttl:       durationpb.New(30e9),
		WrittenBy: "someone",
		Labels:    map[string]string{"team": "edge"},
	})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		path  string
		value []byte
	}{
		{"cluster/default/a", valid},
		{"cluster/default/a", withTTL},
		{"cluster/default/a", []byte("\xff\xfe\x00garbage")},
		{"cluster/default/a", nil},
		{"cluster/default/b", valid},
		{"listener/default/a", valid},
		{"listener/default/l", envelope(f, &listenerv3.Listener{Name: "l"})},
		{"cluster/edge/a/b", envelope(f, &clusterv3.Cluster{Name: "a/b"})},
		{"nosuch/default/a", valid},
		{"cluster//a", valid},
		{"cluster/default/", envelope(f, &clusterv3.Cluster{})},
		{"cluster/default/a", envelope(f, nil)},
		{"", nil},
	} {
		f.Add(seed.path, seed.value)
	}
	f.Fuzz(func(t *testing.T, path string, value []byte) {
		k, env, err := store.DecodeValue(path, value)
		if err != nil {
			if !errors.Is(err, store.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if env != nil {
				t.Fatal("an envelope with an error")
			}
			return
		}
		if env == nil || k.Type == nil {
			t.Fatalf("DecodeValue = %v, %v, nil", k, env)
		}
		if got := k.String(); got != path {
			t.Errorf("key %q parsed from %q", got, path)
		}
		if err := resource.ValidateStoredScope(k.Scope); err != nil {
			t.Errorf("accepted scope: %v", err)
		}
		if got := env.GetBody().GetTypeUrl(); got != k.Type.URL {
			t.Errorf("accepted a %s body under a %s key", got, k.Type)
		}
		msg, err := resource.Unmarshal(k.Type, env.GetBody().GetValue())
		if err != nil {
			t.Fatalf("accepted a body that does not decode: %v", err)
		}
		if got := k.Type.NameOf(msg); got != k.Name || got == "" {
			t.Errorf("accepted a body named %q under the key %q", got, path)
		}
	})
}
