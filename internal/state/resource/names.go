package resource

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/legation-io/legation/internal/state/xdstp"
)

// CheckName checks name as the name of one resource of type t and
// returns the form Legation stores, serves and compares it in. An
// old-style name (not "xdstp:") must pass ValidateName and is returned
// as is. An xdstp:// name (xRFC TP1) must also parse, name one resource
// rather than a glob collection, and carry t's message in its type
// segment; it is returned in its normalized form (context parameters
// sorted, one percent-encoding), so that two spellings of one name are
// one resource.
func (t *Type) CheckName(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	if !xdstp.IsXDSTP(name) {
		return name, nil
	}
	n, err := xdstp.Parse(name)
	if err != nil {
		return "", err
	}
	if n.Glob {
		return "", fmt.Errorf("name %q is a glob collection (ending in /*), which names a set of resources, not one", name)
	}
	if want := t.MessageName(); n.Type != want {
		return "", fmt.Errorf("name %q: its type segment %q is not %q, the message of a %s", name, n.Type, want, t.Name)
	}
	norm := n.String()
	if len(norm) > MaxNameLen {
		return "", fmt.Errorf("name %q is %d bytes long normalized, more than the %d allowed", name, len(norm), MaxNameLen)
	}
	return norm, nil
}

// MessageName is the full name of t's message, as an xdstp:// name's
// type segment gives it (e.g. envoy.config.cluster.v3.Cluster).
func (t *Type) MessageName() string { return strings.TrimPrefix(t.URL, xdstp.TypeURLPrefix) }

// SetName sets the resource name held in m, which must be of type t; a
// message of an Unnamed type holds none and is left as it is.
func (t *Type) SetName(m proto.Message, name string) {
	if t.nameField == nil {
		return
	}
	m.ProtoReflect().Set(t.nameField, protoreflect.ValueOfString(name))
}

// nameFieldOf is the field of desc that holds a resource's name, nil if
// it has none.
func nameFieldOf(desc protoreflect.MessageDescriptor) protoreflect.FieldDescriptor {
	if f := desc.Fields().ByName("name"); f != nil {
		return f
	}
	return desc.Fields().ByName("cluster_name") // ClusterLoadAssignment
}
