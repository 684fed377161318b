package scope

import (
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/legation-io/legation/internal/store"
)

// GroupFunc derives a node's group (its scope besides "default") from its
// Node message. An empty group means the default scope only.
type GroupFunc func(*corev3.Node) string

// ParseGroupBy returns the GroupFunc of a --group-by value: "cluster",
// "id" or "metadata:KEY" (a string field of the node's metadata).
func ParseGroupBy(s string) (GroupFunc, error) {
	switch {
	case s == "" || s == "cluster":
		return func(n *corev3.Node) string { return clean(n.GetCluster()) }, nil
	case s == "id":
		return func(n *corev3.Node) string { return clean(n.GetId()) }, nil
	case strings.HasPrefix(s, "metadata:"):
		key := strings.TrimPrefix(s, "metadata:")
		if key == "" {
			return nil, errors.New("scope: --group-by metadata:KEY needs a key")
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
	return nil, fmt.Errorf("scope: --group-by %q: want cluster, id or metadata:KEY", s)
}

// clean maps a group that cannot be a scope (it would hold '/', or is the
// default scope's name) to no group.
func clean(g string) string {
	if g == store.DefaultScope || strings.ContainsAny(g, "/ \t\n") || len(g) > 253 {
		return ""
	}
	return g
}
