package scope

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// GroupFunc derives a node's group (its scope besides "default") from its
// Node message. An empty group means the default scope only.
type GroupFunc func(*corev3.Node) string

// ParseGroupBy returns the GroupFunc of a --group-by value: "cluster",
// "id" or "metadata:KEY" (a string field of the node's metadata; KEY is
// not empty and has no leading or trailing space). It is also xds-node's
// check of the flag: its errors name --group-by and are shown to the user
// as they are.
func ParseGroupBy(s string) (GroupFunc, error) {
	switch s {
	case "cluster":
		return func(n *corev3.Node) string { return clean(n.GetCluster()) }, nil
	case "id":
		return func(n *corev3.Node) string { return clean(n.GetId()) }, nil
	}
	if key, ok := strings.CutPrefix(s, "metadata:"); ok {
		if key == "" || strings.TrimSpace(key) != key {
			return nil, fmt.Errorf("--group-by %q: metadata needs a key, as in metadata:team", s)
		}
		return func(n *corev3.Node) string {
			v, ok := n.GetMetadata().GetFields()[key]
			if !ok {
				return ""
			}
			if sv, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				return clean(sv.StringValue)
			}
			return ""
		}, nil
	}
	return nil, fmt.Errorf("--group-by %q: want cluster, id or metadata:KEY", s)
}

// clean maps a group that cannot be a scope (it would hold '/', is the
// default scope's name or one reserved for rollouts) to no group.
func clean(g string) string {
	if g == store.DefaultScope || strings.ContainsAny(g, "/ \t\n") || len(g) > 253 || strings.HasPrefix(g, resource.ReservedScopePrefix) {
		return ""
	}
	return g
}
