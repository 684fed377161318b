package resource

import (
	"strconv"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Private keys belong in SDS secrets, which are served only to clients
// allowed the scope's secrets (docs/concepts/design.md, "Security"). A key written
// inline in a listener or a cluster would go to anyone who may see that
// listener or cluster. InlineKeys finds such keys so that xdsadmin apply
// can refuse them and the view can mark the resources that carry them.

const (
	dataSourceName      = protoreflect.FullName("envoy.config.core.v3.DataSource")
	tlsCertificateName  = protoreflect.FullName("envoy.extensions.transport_sockets.tls.v3.TlsCertificate")
	typedStructURL      = "type.googleapis.com/xds.type.v3.TypedStruct"
	udpaTypedStructURL  = "type.googleapis.com/udpa.type.v1.TypedStruct"
	privateKeyProvider  = protoreflect.Name("private_key_provider")
	inlineBytesField    = protoreflect.Name("inline_bytes")
	inlineStringField   = protoreflect.Name("inline_string")
	passwordField       = protoreflect.Name("password")
	privateKeyFieldName = protoreflect.Name("private_key")
	pkcs12FieldName     = protoreflect.Name("pkcs12")
)

// InlineKeys returns the path of every inline private key in m, in the
// path form of ValidateDeep (through every Any, and every TypedStruct,
// naming the unpacked type in parentheses):
//
//	filter_chains[0].transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext).common_tls_context.tls_certificates[0].private_key
//
// An inline private key is a DataSource given inline (inline_bytes or
// inline_string) as a private_key or pkcs12 field anywhere (a
// TlsCertificate's, a gRPC client's SslCredentials'), as a
// TlsCertificate's password, or anywhere under a TlsCertificate's
// private_key_provider. A DataSource naming a file or an environment
// variable is not inline: the key stays on the client's machine. The
// caller decides what a secret resource may carry: InlineKeys looks at
// any message.
func InlineKeys(m proto.Message) []string {
	var w keyWalker
	w.message("", m.ProtoReflect(), false, 0)
	return w.paths
}

// CarriesInlineKey reports whether the stored body b of a resource of
// type t holds an inline private key (InlineKeys). It is false for an SDS
// secret, where keys belong, and for a body that does not decode.
func CarriesInlineKey(t *Type, b []byte) bool {
	if t == Secret {
		return false
	}
	var s keyScan
	s.message(b, t.desc, false, 0)
	if !s.undecided {
		return s.found
	}
	m, err := Unmarshal(t, b)
	if err != nil {
		return false
	}
	w := keyWalker{first: true}
	w.message("", m.ProtoReflect(), false, 0)
	return len(w.paths) > 0
}

// keyWalker walks a message for inline private keys, collecting their
// paths (or only the first, when first is set).
type keyWalker struct {
	first bool
	paths []string
}

func (w *keyWalker) done() bool { return w.first && len(w.paths) > 0 }

// message walks the set fields of m at path; inProvider: m is under a
// private_key_provider, where every inline DataSource is key material.
func (w *keyWalker) message(path string, m protoreflect.Message, inProvider bool, depth int) {
	isCert := m.Descriptor().FullName() == tlsCertificateName
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		md := fd.Message()
		if md == nil {
			return true
		}
		if fd.IsMap() {
			md = fd.MapValue().Message()
			if md == nil {
				return true
			}
		}
		p := join(path, string(fd.Name()))
		keyField := fd.Name() == privateKeyFieldName || fd.Name() == pkcs12FieldName || (isCert && fd.Name() == passwordField)
		prov := inProvider || (isCert && fd.Name() == privateKeyProvider)
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.value(p+"["+strconv.Quote(k.String())+"]", md, mv.Message(), keyField, prov, depth)
				return !w.done()
			})
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && !w.done(); i++ {
				w.value(p+"["+strconv.Itoa(i)+"]", md, l.Get(i).Message(), keyField, prov, depth)
			}
		default:
			w.value(p, md, v.Message(), keyField, prov, depth)
		}
		return !w.done()
	})
}

// value handles one message value m of type md at path: a DataSource is
// judged, an Any unpacked, any other message walked.
func (w *keyWalker) value(path string, md protoreflect.MessageDescriptor, m protoreflect.Message, keyField, inProvider bool, depth int) {
	switch md.FullName() {
	case dataSourceName:
		if (keyField || inProvider) && inline(m) {
			w.paths = append(w.paths, path)
		}
	case anyFullName:
		a, ok := m.Interface().(*anypb.Any)
		if !ok { // a dynamic Any: read its two fields
			a = &anypb.Any{
				TypeUrl: m.Get(md.Fields().ByName("type_url")).String(),
				Value:   m.Get(md.Fields().ByName("value")).Bytes(),
			}
		}
		w.anyValue(path, a, inProvider, depth+1)
	default:
		w.message(path, m, inProvider, depth)
	}
}

// inline reports whether a DataSource holds its data itself.
func inline(m protoreflect.Message) bool {
	f := m.Descriptor().Fields()
	return m.Has(f.ByName(inlineBytesField)) || m.Has(f.ByName(inlineStringField))
}

// anyValue unpacks an Any (and a TypedStruct, which Envoy reads as the
// message its type_url names) and walks what it holds. An Any that does
// not unpack is skipped: apply has refused it already (ValidateDeep), and
// Envoy would refuse it too.
func (w *keyWalker) anyValue(path string, a *anypb.Any, inProvider bool, depth int) {
	if depth > maxAnyDepth {
		return
	}
	url, structured := a.GetTypeUrl(), (*structpb.Struct)(nil)
	switch url {
	case typedStructURL:
		var ts xdstypev3.TypedStruct
		if proto.Unmarshal(a.GetValue(), &ts) != nil {
			return
		}
		url, structured = ts.GetTypeUrl(), ts.GetValue()
	case udpaTypedStructURL:
		var ts udpatypev1.TypedStruct
		if proto.Unmarshal(a.GetValue(), &ts) != nil {
			return
		}
		url, structured = ts.GetTypeUrl(), ts.GetValue()
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return
	}
	inner := mt.New().Interface()
	if structured != nil {
		js, err := protojson.Marshal(structured)
		if err != nil || (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, inner) != nil {
			return
		}
	} else if proto.Unmarshal(a.GetValue(), inner) != nil {
		return
	}
	w.value(path+"("+string(mt.Descriptor().FullName())+")", mt.Descriptor(), inner.ProtoReflect(), false, inProvider, depth)
}
