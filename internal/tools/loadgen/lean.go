package loadgen

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// The load tool reads only what it needs of a response, straight from the
// wire: each resource's body, name and version, and of a body only the
// name the client looks up. It runs beside the replica it measures, so
// what it spends per response is taken from the replica.
//
// The readers agree with proto.Unmarshal wherever proto.Unmarshal
// succeeds (FuzzLeanNames): the last occurrence of a scalar field wins,
// the occurrences of a message field merge, a oneof holds its last case,
// a field of an unexpected wire type is an unknown field. They fail only
// where proto.Unmarshal fails too: on malformed wire data along what they
// read, and on a string they read that is not UTF-8. They do not look
// into what they skip, so a malformed message in a field the client does
// not read is not an error here.

var errUTF8 = errors.New("string field contains invalid UTF-8")

// field is one field of a message: its number, wire type and, for the
// bytes wire type, its value.
type field struct {
	num protowire.Number
	typ protowire.Type
	val []byte
}

// next reads the field at the start of b and returns it with the rest of
// b.
func next(b []byte) (field, []byte, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	b = b[n:]
	if typ == protowire.BytesType {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return field{}, nil, protowire.ParseError(n)
		}
		return field{num: num, typ: typ, val: v}, b[n:], nil
	}
	n = protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	return field{num: num, typ: typ}, b[n:], nil
}

// str is f's value as a string field numbered num: ok when f is one.
func (f field) str(num protowire.Number) ([]byte, bool, error) {
	if f.num != num || f.typ != protowire.BytesType {
		return nil, false, nil
	}
	if !utf8.Valid(f.val) {
		return nil, false, errUTF8
	}
	return f.val, true, nil
}

// keep sets *dst to f's value when f is the string field num.
func (f field) keep(num protowire.Number, dst *[]byte) error {
	v, ok, err := f.str(num)
	if ok {
		*dst = v
	}
	return err
}

// is reports whether f is the message or bytes field numbered num.
func (f field) is(num protowire.Number) bool {
	return f.num == num && f.typ == protowire.BytesType
}

// claName reads field 1 of a message, a string: the cluster_name of a
// ClusterLoadAssignment, the name of a RouteConfiguration; "" when b is
// malformed.
func claName(b []byte) string { return string(leanName(b)) }

// stringField is the string field num of the message b.
func stringField(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if err := f.keep(num, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// clusterEDSName is the name a Cluster's endpoints are asked for by: its
// eds_cluster_config.service_name, else its name.
func clusterEDSName(b []byte) ([]byte, error) {
	var name, service []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if err := f.keep(1, &name); err != nil {
			return nil, err
		}
		if f.is(3) { // eds_cluster_config
			for e := f.val; len(e) > 0; {
				g, rest, err := next(e)
				if err != nil {
					return nil, err
				}
				e = rest
				if v, ok, err := g.str(2); err != nil {
					return nil, err
				} else if ok {
					service = v
				}
			}
		}
	}
	if len(service) > 0 {
		return service, nil
	}
	return name, nil
}

// listenerRoutes calls fn with the rds.route_config_name of each
// HttpConnectionManager filter of a Listener's filter chains, in order ("" for
// one that takes its routes otherwise).
func listenerRoutes(b []byte, fn func(route []byte)) error {
	// A first pass reads the name, for errors, and checks the fields.
	var name []byte
	for l := b; len(l) > 0; {
		f, rest, err := next(l)
		if err != nil {
			return fmt.Errorf("listener: %w", err)
		}
		l = rest
		if err := f.keep(1, &name); err != nil {
			return fmt.Errorf("listener: %w", err)
		}
	}
	for len(b) > 0 {
		f, rest, _ := next(b)
		b = rest
		if !f.is(3) { // filter_chains
			continue
		}
		for fc := f.val; len(fc) > 0; {
			g, rest, err := next(fc)
			if err != nil {
				return fmt.Errorf("listener: %w", err)
			}
			fc = rest
			if !g.is(3) { // filters
				continue
			}
			hcm, ok, err := filterHCM(g.val)
			if err != nil {
				return fmt.Errorf("listener: %w", err)
			}
			if !ok {
				continue
			}
			route, err := hcmRoute(hcm)
			if err != nil {
				return fmt.Errorf("listener %s: %w", name, err)
			}
			fn(route)
		}
	}
	return nil
}

// filterHCM is the HttpConnectionManager a Filter's typed_config holds;
// ok false when it holds something else.
func filterHCM(b []byte) (hcm []byte, ok bool, err error) {
	// typed, typeURL and value are the oneof config_type when it is
	// typed_config (an Any: type_url, value).
	var typed bool
	var typeURL, value []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, false, err
		}
		b = rest
		if _, _, err := f.str(1); err != nil { // name
			return nil, false, err
		}
		switch {
		case f.is(4): // typed_config: the same case again merges
			if !typed {
				typed, typeURL, value = true, nil, nil
			}
			for a := f.val; len(a) > 0; {
				g, rest, err := next(a)
				if err != nil {
					return nil, false, err
				}
				a = rest
				if v, ok, err := g.str(1); err != nil {
					return nil, false, err
				} else if ok {
					typeURL = v
				}
				if g.is(2) {
					value = g.val
				}
			}
		case f.is(5): // config_discovery
			typed = false
		}
	}
	if !typed || string(typeURL) != hcmURL {
		return nil, false, nil
	}
	return value, true, nil
}

// hcmRoute is an HttpConnectionManager's rds.route_config_name; "" when
// its route_specifier is not rds.
func hcmRoute(b []byte) ([]byte, error) {
	var rds bool
	var route []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		switch {
		case f.is(3): // rds: the same case again merges
			if !rds {
				rds, route = true, nil
			}
			for r := f.val; len(r) > 0; {
				g, rest, err := next(r)
				if err != nil {
					return nil, err
				}
				r = rest
				if v, ok, err := g.str(2); err != nil {
					return nil, err
				} else if ok {
					route = v
				}
			}
		case f.is(4), f.is(31): // route_config, scoped_routes
			rds = false
		}
	}
	if !rds {
		return nil, nil
	}
	return route, nil
}

// sotwResponse is a DiscoveryResponse as the client reads it. Its byte
// slices are into the received message, which it holds until release.
type sotwResponse struct {
	data                        mem.Buffer
	size                        int // bytes on the wire
	versionInfo, typeURL, nonce string
	bodies                      [][]byte // the resources' values
}

// release lets go of the received message; r's byte slices are invalid
// after.
func (r *sotwResponse) release() {
	if r.data != nil {
		r.data.Free()
		r.data = nil
	}
	clear(r.bodies)
	r.bodies = r.bodies[:0]
}

// decode reads b, a DiscoveryResponse, into r.
func (r *sotwResponse) decode(b []byte) error {
	r.size = len(b)
	r.bodies = r.bodies[:0]
	var version, typeURL, nonce []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == 1:
			if err := f.keep(1, &version); err != nil {
				return err
			}
		case f.is(2): // resources
			body, err := anyValue(f.val)
			if err != nil {
				return err
			}
			r.bodies = append(r.bodies, body)
		case f.num == 4:
			if err := f.keep(4, &typeURL); err != nil {
				return err
			}
		case f.num == 5:
			if err := f.keep(5, &nonce); err != nil {
				return err
			}
		}
	}
	r.versionInfo, r.typeURL, r.nonce = string(version), internType(typeURL), string(nonce)
	return nil
}

// anyValue is the value of an Any, checking its type_url.
func anyValue(b []byte) ([]byte, error) {
	var value []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		if _, _, err := f.str(1); err != nil {
			return nil, err
		}
		if f.is(2) {
			value = f.val
		}
	}
	return value, nil
}

// internType is a type URL, without allocating for those the client asks
// for.
func internType(b []byte) string {
	switch string(b) {
	case cdsURL:
		return cdsURL
	case edsURL:
		return edsURL
	case ldsURL:
		return ldsURL
	case rdsURL:
		return rdsURL
	}
	return string(b)
}

// deltaResource is a Resource of a DeltaDiscoveryResponse as the client
// reads it.
type deltaResource struct {
	name, version []byte
	body          []byte // its resource's value
}

// deltaResponse is a DeltaDiscoveryResponse as the client reads it; see
// sotwResponse.
type deltaResponse struct {
	data                              mem.Buffer
	size                              int
	systemVersionInfo, typeURL, nonce string
	resources                         []deltaResource
	removed                           []string
}

// release: see sotwResponse.release.
func (r *deltaResponse) release() {
	if r.data != nil {
		r.data.Free()
		r.data = nil
	}
	clear(r.resources)
	r.resources = r.resources[:0]
	r.removed = nil
}

// decode reads b, a DeltaDiscoveryResponse, into r.
func (r *deltaResponse) decode(b []byte) error {
	r.size = len(b)
	r.resources = r.resources[:0]
	r.removed = nil
	var version, typeURL, nonce []byte
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return err
		}
		b = rest
		switch {
		case f.num == 1:
			if err := f.keep(1, &version); err != nil {
				return err
			}
		case f.is(2): // resources
			res, err := readResource(f.val)
			if err != nil {
				return err
			}
			r.resources = append(r.resources, res)
		case f.num == 4:
			if err := f.keep(4, &typeURL); err != nil {
				return err
			}
		case f.num == 5:
			if err := f.keep(5, &nonce); err != nil {
				return err
			}
		case f.num == 6:
			if v, ok, err := f.str(6); err != nil {
				return err
			} else if ok {
				r.removed = append(r.removed, string(v))
			}
		}
	}
	r.systemVersionInfo, r.typeURL, r.nonce = string(version), internType(typeURL), string(nonce)
	return nil
}

// readResource reads a Resource: its name, version and resource (an Any,
// whose occurrences merge).
func readResource(b []byte) (deltaResource, error) {
	var out deltaResource
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return deltaResource{}, err
		}
		b = rest
		switch {
		case f.num == 1:
			if err := f.keep(1, &out.version); err != nil {
				return deltaResource{}, err
			}
		case f.is(2):
			for a := f.val; len(a) > 0; {
				g, rest, err := next(a)
				if err != nil {
					return deltaResource{}, err
				}
				a = rest
				if _, _, err := g.str(1); err != nil {
					return deltaResource{}, err
				}
				if g.is(2) {
					out.body = g.val
				}
			}
		case f.num == 3:
			if err := f.keep(3, &out.name); err != nil {
				return deltaResource{}, err
			}
		case f.num == 4: // aliases
			if _, _, err := f.str(4); err != nil {
				return deltaResource{}, err
			}
		}
	}
	return out, nil
}

// leanCodec is gRPC's proto codec but for the responses the client
// receives, which it reads as sotwResponse and deltaResponse, holding the
// received message rather than copying out of it.
type leanCodec struct{}

var protoCodec = encoding.GetCodecV2(grpcproto.Name)

// Name is that of the proto codec, so that the server sees the usual
// content-subtype.
func (leanCodec) Name() string { return grpcproto.Name }

func (leanCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

func (leanCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch r := v.(type) {
	case *sotwResponse:
		r.release()
		r.data = data.MaterializeToBuffer(mem.DefaultBufferPool())
		if err := r.decode(r.data.ReadOnlyData()); err != nil {
			r.release()
			return fmt.Errorf("DiscoveryResponse: %w", err)
		}
		return nil
	case *deltaResponse:
		r.release()
		r.data = data.MaterializeToBuffer(mem.DefaultBufferPool())
		if err := r.decode(r.data.ReadOnlyData()); err != nil {
			r.release()
			return fmt.Errorf("DeltaDiscoveryResponse: %w", err)
		}
		return nil
	}
	return protoCodec.Unmarshal(data, v)
}

// leanName is claName without the string: field 1 of b, nil when b is
// malformed.
func leanName(b []byte) []byte {
	v, err := stringField(b, 1)
	if err != nil {
		return nil
	}
	return v
}
