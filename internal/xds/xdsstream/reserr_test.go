package xdsstream

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/xdstp"
)

func TestAppendErrorsKey(t *testing.T) {
	keys := map[string]string{}
	for what, errs := range map[string][]ResourceErr{
		"none":              nil,
		"b not found":       {{Name: "b", Code: codes.NotFound}},
		"b denied":          {{Name: "b", Code: codes.PermissionDenied}},
		"c not found":       {{Name: "c", Code: codes.NotFound}},
		"b and c not found": {{Name: "b", Code: codes.NotFound}, {Name: "c", Code: codes.NotFound}},
	} {
		k := string(AppendErrorsKey([]byte("N\x00endpoint\x007"), errs))
		if other, dup := keys[k]; dup {
			t.Errorf("%s and %s share the key %q", what, other, k)
		}
		keys[k] = what
	}
	if got := string(AppendErrorsKey([]byte("k"), nil)); got != "k" {
		t.Errorf("no errors appended %q, want nothing", got)
	}
}

func TestToldOnce(t *testing.T) {
	var told Told
	errs := told.Add(nil, "b", codes.NotFound)
	told.Sent(errs)
	if got := told.Add(nil, "b", codes.NotFound); len(got) != 0 {
		t.Errorf("told again: %v", got)
	}
	if got := told.Add(nil, "b", codes.PermissionDenied); len(got) != 1 {
		t.Errorf("another code not told: %v", got)
	}
	told.Keep(func(string) bool { return false })
	if told.Len() != 0 || told.m != nil {
		t.Errorf("unsubscribed names kept: %v", told.m)
	}
	if got := told.Add(nil, "b", codes.NotFound); len(got) != 1 {
		t.Errorf("subscribed again, not told again: %v", got)
	}
	re := ResourceErrors(resource.Endpoint, []ResourceErr{{Name: "b", Code: codes.PermissionDenied}}, xdstp.Authorities{})
	if len(re) != 1 || re[0].GetResourceName().GetName() != "b" || re[0].GetErrorDetail().GetCode() != int32(codes.PermissionDenied) || re[0].GetErrorDetail().GetMessage() == "" {
		t.Errorf("ResourceErrors = %v", re)
	}
	// A name of an authority the server does not serve, or a malformed
	// xdstp name, is told so.
	auth, err := xdstp.NewAuthorities([]string{"fed-a"})
	if err != nil {
		t.Fatal(err)
	}
	const eds = "/envoy.config.endpoint.v3.ClusterLoadAssignment/svc"
	for name, want := range map[string]string{
		"xdstp://fed-b" + eds:                               `authority "fed-b" is not one this server serves (fed-a)`,
		"xdstp://fed-a" + eds + "?x":                        "not a valid xdstp name",
		"xdstp://fed-a" + eds:                               "no endpoint named",
		"xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc": `its type segment "envoy.config.cluster.v3.Cluster" is not "envoy.config.endpoint.v3.ClusterLoadAssignment"`,
		"plain": "no endpoint named",
	} {
		re := ResourceErrors(resource.Endpoint, []ResourceErr{{Name: name, Code: codes.NotFound}}, auth)
		if msg := re[0].GetErrorDetail().GetMessage(); !strings.Contains(msg, want) {
			t.Errorf("the error of %q says %q, want %q", name, msg, want)
		}
	}
}
