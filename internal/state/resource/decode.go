package resource

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// DiscoveryResponseURL is the type URL of a whole DiscoveryResponse
// document, the format of Envoy's filesystem subscriptions.
const DiscoveryResponseURL = "type.googleapis.com/envoy.service.discovery.v3.DiscoveryResponse"

const resourceWrapperURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// MaxNameLen bounds resource names; longer names are rejected.
const MaxNameLen = 1024

// Doc is one validated resource read from an operator's file.
type Doc struct {
	// Source is the file name ("-" for standard input).
	Source string
	// Index is the 1-based number of the document in the file.
	Index int
	// Item is the 1-based position of the resource within a
	// DiscoveryResponse document, 0 for a single-resource document.
	Item int
	// Type and Name identify the resource.
	Type *Type
	Name string
	// Message is the decoded resource.
	Message proto.Message
	// Body is the resource deterministically marshaled: these bytes are
	// what is stored and what clients receive.
	Body *anypb.Any
}

// Where says where the document came from, for messages.
func (d *Doc) Where() string { return where(d.Source, d.Index, d.Item) }

func where(source string, index, item int) string {
	s := fmt.Sprintf("%s: document %d", source, index)
	if item > 0 {
		s += fmt.Sprintf(", resource %d", item)
	}
	return s
}

// DocError is an error found in one document. It names the file, the
// document, the resource when known, and what is wrong.
type DocError struct {
	Source   string
	Index    int
	Item     int
	Resource string // "cluster \"name\"" when known
	Err      error
}

func (e *DocError) Error() string {
	s := where(e.Source, e.Index, e.Item)
	if e.Resource != "" {
		s += " (" + e.Resource + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *DocError) Unwrap() error { return e.Err }

var unmarshalStrict = protojson.UnmarshalOptions{} // unknown fields are errors

// Decode reads the YAML or JSON documents in data (documents separated by
// "---" lines) and returns every resource they hold, decoded strictly and
// validated. source names the input in errors. Empty documents are skipped.
// The first invalid document stops decoding with a *DocError.
func Decode(source string, data []byte) ([]Doc, error) {
	var docs []Doc
	for i, raw := range splitDocuments(data) {
		got, err := decodeDocument(source, i+1, raw)
		if err != nil {
			return nil, err
		}
		docs = append(docs, got...)
	}
	return docs, nil
}

// splitDocuments splits a YAML stream into its documents. A document
// starts at a "---" line (anything after "--- " on that line is the start
// of the document's content, as in YAML) and ends at the next "---" or at
// a "..." line. Comments and blank lines before the first "---" are a
// preamble, not a document, so a file that starts with a comment header
// and "---" numbers its first resource 1. Every document boundary YAML
// knows is split here: the YAML parser reads only the first document of
// what it is given and would silently drop the rest. JSON input is one
// document.
func splitDocuments(data []byte) [][]byte {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 byte order mark
	var docs [][]byte
	var cur bytes.Buffer
	// open: the current document was started by "---" and counts even
	// when empty; content: it holds more than blank lines and comments.
	open, content := false, false
	flush := func() {
		if open || content {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
		open, content = false, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for sc.Scan() {
		line := sc.Bytes()
		if rest, ok := marker(line, "---"); ok {
			flush()
			open = true
			line = bytes.TrimLeft(rest, " \t")
		} else if _, ok := marker(line, "..."); ok {
			flush()
			continue
		}
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			content = true
		}
		cur.Write(line)
		cur.WriteByte('\n')
	}
	flush()
	return docs
}

// marker reports whether line is the document marker m ("---" or "...")
// alone or followed by white space, and returns what follows it.
func marker(line []byte, m string) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(m))
	if !ok || (len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t') {
		return nil, false
	}
	return rest, true
}

var protojsonLine = regexp.MustCompile(`\(line \d+:\d+\): `)

func decodeDocument(source string, index int, raw []byte) ([]Doc, error) {
	fail := func(resource string, err error) error {
		return &DocError{Source: source, Index: index, Resource: resource, Err: err}
	}
	js, err := yaml.YAMLToJSONStrict(raw) // strict: a repeated key is an error, not silently the last
	if err != nil {
		return nil, fail("", fmt.Errorf("bad YAML/JSON: %w", err))
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return nil, nil // an empty document, e.g. only comments
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(js, &head); err != nil {
		return nil, fail("", errors.New("a document must be a mapping with an \"@type\" key"))
	}
	var typeURL string
	if _, typed := head["@type"]; !typed {
		if _, ok := head["resources"]; ok {
			// Envoy's filesystem subscription format (what xdsadmin
			// export writes): a DiscoveryResponse without "@type".
			return decodeResponse(source, index, head)
		}
	}
	if err := json.Unmarshal(head["@type"], &typeURL); err != nil || typeURL == "" {
		return nil, fail(guessName(head), errors.New("missing \"@type\" (e.g. \"@type\": "+Cluster.URL+")"))
	}
	if typeURL == DiscoveryResponseURL {
		return decodeResponse(source, index, head)
	}
	label := guessName(head)
	if t, ok := ByURL(typeURL); ok {
		label = t.Name + " " + quote(label)
	} else if typeURL != resourceWrapperURL { // a wrapper names its resource: an LbEndpoint's only name
		return nil, fail(label, fmt.Errorf("unknown @type %q; want one of: %s, %s or %s", typeURL, strings.Join(urls(), ", "), resourceWrapperURL, DiscoveryResponseURL))
	}
	var a anypb.Any
	if err := unmarshalJSON(js, &a); err != nil {
		return nil, fail(label, err)
	}
	d, err := fromAny(source, index, 0, &a)
	if err != nil {
		return nil, err
	}
	return []Doc{d}, nil
}

// decodeResponse decodes a whole DiscoveryResponse document. Its
// resources are decoded one by one, so that an error names the resource
// (its position in the list, its type and name) and not just the document.
func decodeResponse(source string, index int, head map[string]json.RawMessage) ([]Doc, error) {
	fail := func(item int, resource string, err error) error {
		return &DocError{Source: source, Index: index, Item: item, Resource: resource, Err: err}
	}
	var items []json.RawMessage
	if raw, ok := head["resources"]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fail(0, "DiscoveryResponse", errors.New("resources: want a list of resources, each with an \"@type\""))
		}
	}
	// The response's own fields (version_info, type_url, ...) are checked
	// as strictly as the resources.
	rest := make(map[string]json.RawMessage, len(head))
	for k, v := range head {
		if k != "@type" && k != "resources" {
			rest[k] = v
		}
	}
	js, err := json.Marshal(rest)
	if err != nil {
		return nil, fail(0, "DiscoveryResponse", err)
	}
	var dr discoveryv3.DiscoveryResponse
	if err := unmarshalJSON(js, &dr); err != nil {
		return nil, fail(0, "DiscoveryResponse", err)
	}
	docs := make([]Doc, 0, len(items))
	for i, item := range items {
		var a anypb.Any
		if err := unmarshalJSON(item, &a); err != nil {
			return nil, fail(i+1, itemLabel(item), err)
		}
		d, err := fromAny(source, index, i+1, &a)
		if err != nil {
			return nil, err
		}
		if dr.GetTypeUrl() != "" && dr.GetTypeUrl() != d.Type.URL {
			return nil, fail(i+1, d.Type.Name+" "+quote(d.Name),
				fmt.Errorf("resource type %s differs from the response's type_url %s", d.Type.URL, dr.GetTypeUrl()))
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// itemLabel names a resource of a DiscoveryResponse that did not decode,
// as well as can be told from its JSON.
func itemLabel(item json.RawMessage) string {
	var head map[string]json.RawMessage
	if json.Unmarshal(item, &head) != nil {
		return ""
	}
	var typeURL string
	json.Unmarshal(head["@type"], &typeURL) //nolint:errcheck // a missing or odd @type leaves it empty
	if t, ok := ByURL(typeURL); ok {
		return t.Name + " " + quote(guessName(head))
	}
	return guessName(head)
}

func unmarshalJSON(js []byte, m proto.Message) error {
	if err := unmarshalStrict.Unmarshal(js, m); err != nil {
		if uerr := unknownAnyInJSON(js); uerr != nil {
			return uerr
		}
		// protojson's positions refer to the JSON made from the YAML, not
		// to the operator's file: leave them out. protobuf also puts a
		// no-break space after "proto:" at random, to stop callers from
		// matching its messages; operators' scripts get a plain space.
		msg := protojsonLine.ReplaceAllString(err.Error(), "")
		return errors.New(strings.ReplaceAll(msg, "\u00a0", " "))
	}
	return nil
}

// fromAny decodes, validates and re-marshals one resource.
func fromAny(source string, index, item int, a *anypb.Any) (Doc, error) {
	fail := func(resource string, err error) (Doc, error) {
		return Doc{}, &DocError{Source: source, Index: index, Item: item, Resource: resource, Err: err}
	}
	var wrapped string // the name a discovery.v3.Resource wrapper gives
	if a.GetTypeUrl() == resourceWrapperURL {
		var w discoveryv3.Resource
		if err := a.UnmarshalTo(&w); err != nil {
			return fail("", err)
		}
		if w.GetResource() == nil {
			return fail(w.GetName(), errors.New("a discovery.v3.Resource without a body cannot be stored"))
		}
		a, wrapped = w.GetResource(), w.GetName()
	}
	t, ok := ByURL(a.GetTypeUrl())
	if !ok {
		return fail("", fmt.Errorf("unknown @type %q; want one of: %s", a.GetTypeUrl(), strings.Join(urls(), ", ")))
	}
	msg, err := Unmarshal(t, a.GetValue())
	if err != nil {
		return fail(t.Name, err)
	}
	name := t.NameOf(msg)
	if t.Unnamed {
		if wrapped == "" {
			return fail(t.Name, fmt.Errorf("an %s has no name field: give it in a wrapper, {\"@type\": %q, \"name\": NAME, \"resource\": {...}}", t.MessageName(), resourceWrapperURL))
		}
		name = wrapped
	}
	label := t.Name + " " + quote(name)
	norm, err := t.CheckName(name)
	if err != nil {
		return fail(label, err)
	}
	if norm != name {
		t.SetName(msg, norm) // stored and served as one spelling
		name = norm
	}
	if err := Check(msg); err != nil {
		return fail(label, err)
	}
	body, err := Marshal(t, msg)
	if err != nil {
		return fail(label, err)
	}
	return Doc{Source: source, Index: index, Item: item, Type: t, Name: name, Message: msg, Body: body}, nil
}

// Unmarshal decodes the binary form of a resource of type t. Unknown fields
// are kept (binary protobuf cannot tell them from newer fields).
func Unmarshal(t *Type, b []byte) (proto.Message, error) {
	msg := t.New()
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, fmt.Errorf("decode %s: %w", t.Name, err)
	}
	return msg, nil
}

// Marshal encodes a resource deterministically into an Any of its type.
func Marshal(t *Type, m proto.Message) (*anypb.Any, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", t.Name, err)
	}
	return &anypb.Any{TypeUrl: t.URL, Value: b}, nil
}

// Validate runs the Envoy protos' own validation rules (ValidateAll) and
// returns every violation found, each naming the field and the rule.
func Validate(m proto.Message) error {
	v, ok := m.(interface{ ValidateAll() error })
	if !ok {
		return nil
	}
	err := v.ValidateAll()
	if err == nil {
		return nil
	}
	var multi interface{ AllErrors() []error }
	if errors.As(err, &multi) {
		errs := multi.AllErrors()
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return err
}

// ValidateName checks a resource name: not empty, not too long, and free
// of control characters.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name: every resource needs a non-empty name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("name is %d bytes long, more than the %d allowed", len(name), MaxNameLen)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("name %q holds a control character", name)
		}
	}
	return nil
}

// ReservedScopePrefix begins the scopes Legation writes for itself: a
// rollout's canary overlay. No group or apply may name one.
const ReservedScopePrefix = "~"

// ValidateScope checks a scope (node group) name a user gives: that of a
// stored key (ValidateStoredScope), and not one of Legation's own
// (ReservedScopePrefix).
func ValidateScope(scope string) error {
	if err := ValidateStoredScope(scope); err != nil {
		return err
	}
	if strings.HasPrefix(scope, ReservedScopePrefix) {
		return fmt.Errorf("scope %q begins with %q, which is reserved for rollouts' canary overlays", scope, ReservedScopePrefix)
	}
	return nil
}

// ValidateStoredScope checks the scope of a stored key: not empty, at
// most 253 bytes, no '/', no space or control characters.
func ValidateStoredScope(scope string) error {
	if scope == "" {
		return errors.New("empty scope")
	}
	if len(scope) > 253 {
		return fmt.Errorf("scope %q is longer than 253 bytes", scope)
	}
	for _, r := range scope {
		if r <= 0x20 || r == 0x7f || r == '/' {
			return fmt.Errorf("scope %q holds %q: scopes may not hold '/', spaces or control characters", scope, r)
		}
	}
	return nil
}

// CheckUnique returns a *DocError for the first resource whose type and
// name repeat an earlier one in docs.
func CheckUnique(docs []Doc) error {
	seen := make(map[[2]string]*Doc, len(docs))
	for i := range docs {
		d := &docs[i]
		k := [2]string{d.Type.Name, d.Name}
		if first, ok := seen[k]; ok {
			return &DocError{Source: d.Source, Index: d.Index, Item: d.Item, Resource: d.Type.Name + " " + quote(d.Name),
				Err: fmt.Errorf("duplicate name: already defined at %s", first.Where())}
		}
		seen[k] = d
	}
	return nil
}

func guessName(head map[string]json.RawMessage) string {
	for _, k := range []string{"name", "cluster_name", "clusterName"} {
		var s string
		if json.Unmarshal(head[k], &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func urls() []string {
	out := make([]string, 0, len(all))
	for _, t := range all {
		out = append(out, t.URL)
	}
	return out
}
