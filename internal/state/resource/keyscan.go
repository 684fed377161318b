package resource

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The view asks CarriesInlineKey of every resource revision it reads, so
// the search reads the wire form in place, guided by the descriptors,
// instead of decoding the resource: nothing is allocated for a resource
// without a key, and only what can hold one is looked at. It finds what
// keyWalker finds on the decoded resource (FuzzCheck compares them), and
// where the wire form holds a message field twice (which decoding merges)
// it leaves the answer to keyWalker.

// The field numbers of google.protobuf.Any, fixed by protobuf.
const (
	anyTypeURL = 1
	anyValue   = 2
)

// keyScan scans one resource's wire form.
type keyScan struct {
	found bool
	// undecided: the wire form holds a singular message field twice, or
	// a TypedStruct: keyWalker decides on the decoded resource.
	undecided bool
}

// message scans b, a message of type md; inProvider: b is under a
// TlsCertificate's private_key_provider.
func (s *keyScan) message(b []byte, md protoreflect.MessageDescriptor, inProvider bool, depth int) {
	isCert := md.FullName() == tlsCertificateName
	fields := md.Fields()
	var buf [8]protowire.Number
	seen := buf[:0] // singular message fields met
	for len(b) > 0 && !s.found && !s.undecided {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return
		}
		v := b[:m]
		b = b[m:]
		fd := fields.ByNumber(num)
		if typ != protowire.BytesType || fd == nil || fd.Message() == nil {
			continue
		}
		if fd.Cardinality() != protoreflect.Repeated {
			for _, x := range seen {
				if x == num {
					s.undecided = true
					return
				}
			}
			seen = append(seen, num)
		}
		body, k := protowire.ConsumeBytes(v)
		if k < 0 {
			return
		}
		keyField := fd.Name() == privateKeyFieldName || fd.Name() == pkcs12FieldName || (isCert && fd.Name() == passwordField)
		prov := inProvider || (isCert && fd.Name() == privateKeyProvider)
		s.value(body, fd.Message(), keyField, prov, depth)
	}
}

// value scans b, a message of type md held by a field; keyField: the
// field is one a key is given in.
func (s *keyScan) value(b []byte, md protoreflect.MessageDescriptor, keyField, inProvider bool, depth int) {
	switch md.FullName() {
	case dataSourceName:
		if (keyField || inProvider) && inlineWire(b, md) {
			s.found = true
		}
	case anyFullName:
		s.anyValue(b, inProvider, depth+1)
	default:
		s.message(b, md, inProvider, depth)
	}
}

// anyValue scans an Any's wire form b.
func (s *keyScan) anyValue(b []byte, inProvider bool, depth int) {
	if depth > maxAnyDepth {
		return
	}
	var url string
	var value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return
		}
		if typ == protowire.BytesType && (num == anyTypeURL || num == anyValue) {
			x, _ := protowire.ConsumeBytes(b[:m])
			if num == anyTypeURL {
				url = string(x) // the last one, as decoding keeps
			} else {
				value = x
			}
		}
		b = b[m:]
	}
	if url == typedStructURL || url == udpaTypedStructURL {
		s.undecided = true
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return
	}
	s.value(value, mt.Descriptor(), false, inProvider, depth)
}

// inlineWire reports whether a DataSource's wire form b (md its
// descriptor) holds its data itself: its specifier, the last one given,
// is inline_bytes or inline_string.
func inlineWire(b []byte, md protoreflect.MessageDescriptor) bool {
	spec := md.Oneofs().ByName("specifier").Fields()
	inBytes, inString := md.Fields().ByName(inlineBytesField).Number(), md.Fields().ByName(inlineStringField).Number()
	last := protowire.Number(0)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
		if spec.ByNumber(num) != nil {
			last = num
		}
	}
	return last == inBytes || last == inString
}
