package resource

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// RouterURL is the type URL of the router HTTP filter, which must be the
// last of an HttpConnectionManager's http_filters.
const RouterURL = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"

// routerName is the router filter's well-known name, accepted for a filter
// given by name without a typed_config.
const routerName = "envoy.filters.http.router"

const anyFullName = protoreflect.FullName("google.protobuf.Any")

// maxAnyDepth bounds the nesting of Any inside Any that ValidateDeep
// follows; deeper nesting is an error (Envoy's own configurations nest two
// or three deep).
const maxAnyDepth = 32

// Check runs every check a resource must pass before it is stored: the
// Envoy protos' own rules on the resource (Validate), the form of the
// LEDS collections it names (checkCollections) and, through
// ValidateDeep, the protos' rules on every google.protobuf.Any inside it.
func Check(m proto.Message) error {
	if err := Validate(m); err != nil {
		return err
	}
	if err := checkCollections(m); err != nil {
		return err
	}
	return ValidateDeep(m)
}

// ValidateDeep checks what the generated validators leave out: they never
// look inside a google.protobuf.Any (typed_config and the like). Every Any
// in m, at any depth, is unpacked with the types the binary knows and
// validated with the same rules (ValidateAll), recursively, and an
// HttpConnectionManager found this way must end its http_filters with the
// router, as Envoy and gRPC clients require. An Any of a type the binary
// does not know is an error. Every error is a path from m's fields to the
// field at fault, naming each Any's type in parentheses, then the rule:
//
//	filter_chains[0].filters[0].typed_config(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).stat_prefix: value length must be at least 1 runes
//
// All the violations found are returned, joined by "; ". m itself is not
// validated: that is Validate's job.
func ValidateDeep(m proto.Message) error {
	var w deepWalker
	w.message("", m.ProtoReflect(), 0)
	if len(w.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(w.errs, "; "))
}

type deepWalker struct {
	errs []string
}

func (w *deepWalker) fail(path, format string, args ...any) {
	w.errs = append(w.errs, path+": "+fmt.Sprintf(format, args...))
}

// message walks the set fields of m, whose path is path ("" for the
// resource itself), looking for Any.
func (w *deepWalker) message(path string, m protoreflect.Message, depth int) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := join(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.value(p+"["+strconv.Quote(k.String())+"]", fd.MapValue(), mv, depth)
				return true
			})
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			l := v.List()
			for i := range l.Len() {
				w.value(p+"["+strconv.Itoa(i)+"]", fd, l.Get(i), depth)
			}
		case fd.Message() != nil:
			w.value(p, fd, v, depth)
		}
		return true
	})
}

// value handles one message value: an Any is unpacked and checked, any
// other message is walked.
func (w *deepWalker) value(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) {
	m := v.Message()
	if fd.Message().FullName() != anyFullName {
		w.message(path, m, depth)
		return
	}
	a, ok := m.Interface().(*anypb.Any)
	if !ok { // a dynamic Any: read its two fields
		a = new(anypb.Any)
		a.TypeUrl = m.Get(fd.Message().Fields().ByName("type_url")).String()
		a.Value = m.Get(fd.Message().Fields().ByName("value")).Bytes()
	}
	w.anyValue(path, a, depth+1)
}

func (w *deepWalker) anyValue(path string, a *anypb.Any, depth int) {
	if depth > maxAnyDepth {
		w.fail(path, "Any nested more than %d deep", maxAnyDepth)
		return
	}
	url := a.GetTypeUrl()
	if url == "" {
		w.fail(path, "Any without a type URL")
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		w.fail(path, "unknown type %q: not an Envoy extension type this xdsadmin knows", url)
		return
	}
	inner := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), inner); err != nil {
		w.fail(path, "decode %s: %v", mt.Descriptor().FullName(), err)
		return
	}
	p := path + "(" + string(mt.Descriptor().FullName()) + ")"
	if v, ok := inner.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			w.rules(p, mt.Descriptor(), err)
		}
	}
	if hcm, ok := inner.(*hcmv3.HttpConnectionManager); ok {
		w.routerLast(p, hcm)
	}
	w.message(p, inner.ProtoReflect(), depth)
}

// routerLast checks that an HttpConnectionManager's last HTTP filter is
// the router, and that no other filter is: Envoy rejects a listener whose
// last filter is not terminal, gRPC clients one without a router, and a
// filter after the router would never run.
func (w *deepWalker) routerLast(path string, hcm *hcmv3.HttpConnectionManager) {
	filters := hcm.GetHttpFilters()
	p := join(path, "http_filters")
	isRouter := func(f *hcmv3.HttpFilter) bool {
		if tc := f.GetTypedConfig(); tc != nil {
			return filterType(tc) == RouterURL
		}
		return f.GetConfigDiscovery() == nil && f.GetName() == routerName
	}
	for i, f := range filters {
		if isRouter(f) && i != len(filters)-1 {
			w.fail(p+"["+strconv.Itoa(i)+"]", "the router filter (%s) must be the last HTTP filter, not %d of %d", RouterURL, i+1, len(filters))
			return
		}
	}
	if len(filters) == 0 {
		w.fail(p, "no router filter (%s): the last HTTP filter must be the router", RouterURL)
		return
	}
	last := filters[len(filters)-1]
	if last.GetConfigDiscovery() != nil {
		return // its type is known only when Envoy fetches it
	}
	if !isRouter(last) {
		w.fail(p+"["+strconv.Itoa(len(filters)-1)+"]", "last HTTP filter %q is not the router (%s): the last HTTP filter must be the router", last.GetName(), RouterURL)
	}
}

// filterType is the type URL of a filter's configuration, looking
// through a TypedStruct (a configuration given as a Struct) as Envoy does.
func filterType(tc *anypb.Any) string {
	switch tc.GetTypeUrl() {
	case "type.googleapis.com/xds.type.v3.TypedStruct":
		var ts xdstypev3.TypedStruct
		if tc.UnmarshalTo(&ts) == nil {
			return ts.GetTypeUrl()
		}
	case "type.googleapis.com/udpa.type.v1.TypedStruct":
		var ts udpatypev1.TypedStruct
		if tc.UnmarshalTo(&ts) == nil {
			return ts.GetTypeUrl()
		}
	}
	return tc.GetTypeUrl()
}

// pgvError is what the generated validators' errors have in common.
type pgvError interface {
	Field() string
	Reason() string
	Cause() error
}

// rules turns the errors of a generated ValidateAll on a message of type
// md at path into paths of proto field names, one per violation. The
// validators name fields in Go (HttpFilters[0]); the descriptor gives
// their proto names (http_filters[0]).
func (w *deepWalker) rules(path string, md protoreflect.MessageDescriptor, err error) {
	var multi interface{ AllErrors() []error }
	if errors.As(err, &multi) && !isPGV(err) {
		for _, e := range multi.AllErrors() {
			w.rules(path, md, e)
		}
		return
	}
	var pe pgvError
	if !errors.As(err, &pe) {
		w.fail(path, "%v", err)
		return
	}
	goName, suffix, _ := strings.Cut(pe.Field(), "[")
	if suffix != "" {
		suffix = "[" + suffix
	}
	fd := fieldByGoName(md, goName)
	name := goName
	if fd != nil {
		name = string(fd.Name())
	}
	p := join(path, name) + suffix
	cause := pe.Cause()
	if cause != nil && fd != nil && (isPGV(cause) || isMulti(cause)) {
		sub := fd.Message()
		if fd.IsMap() {
			sub = fd.MapValue().Message()
		}
		if sub != nil {
			w.rules(p, sub, cause)
			return
		}
	}
	if cause != nil {
		w.fail(p, "%s: %v", pe.Reason(), cause)
		return
	}
	w.fail(p, "%s", pe.Reason())
}

func isPGV(err error) bool {
	_, ok := err.(pgvError) //nolint:errorlint // the error itself, not one it wraps
	return ok
}

func isMulti(err error) bool {
	_, ok := err.(interface{ AllErrors() []error }) //nolint:errorlint // the error itself, not one it wraps
	return ok
}

// fieldByGoName finds the field of md whose Go name (CamelCase, as the
// validators print it) is goName.
func fieldByGoName(md protoreflect.MessageDescriptor, goName string) protoreflect.FieldDescriptor {
	fields := md.Fields()
	want := strings.ToLower(goName)
	for i := range fields.Len() {
		fd := fields.Get(i)
		if strings.ReplaceAll(string(fd.Name()), "_", "") == want {
			return fd
		}
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// unknownAnyInJSON finds, in a resource's proto3 JSON, the first Any (a
// mapping with an "@type", below the top) whose type the binary does not
// know, and returns an error naming its path and type URL. protojson
// rejects such a document without saying where; this says where. It
// returns nil when it finds none.
func unknownAnyInJSON(js []byte) error {
	var v any
	if json.Unmarshal(js, &v) != nil {
		return nil
	}
	return findUnknownAny("", v, true)
}

func findUnknownAny(path string, v any, top bool) error {
	switch v := v.(type) {
	case map[string]any:
		if url, ok := v["@type"].(string); ok && !top {
			mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
			if err != nil {
				return fmt.Errorf("%s: unknown type %q: not an Envoy extension type this xdsadmin knows", path, url)
			}
			path += "(" + string(mt.Descriptor().FullName()) + ")"
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "@type" {
				continue
			}
			if err := findUnknownAny(join(path, k), v[k], false); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := findUnknownAny(path+"["+strconv.Itoa(i)+"]", e, false); err != nil {
				return err
			}
		}
	}
	return nil
}
