package fsexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	// Registers every Envoy type, so that the Any fields inside resources
	// (typed_config and the like) encode to JSON and YAML.
	"github.com/legation-io/legation/internal/state/resource"
)

// Format is a file format Envoy's filesystem subscriptions read; Envoy
// picks the decoder by the file's extension, which is the format's name.
type Format string

// The formats.
const (
	YAML  Format = "yaml"
	JSON  Format = "json"
	Proto Format = "pb"
)

// Formats lists the formats, for help and errors.
var Formats = []Format{YAML, JSON, Proto}

// ParseFormat checks a format's name.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return "", fmt.Errorf("format %q: want one of %s", s, strings.Join(names, ", "))
}

// shortNames are the files' base names: the xDS service of each type.
var shortNames = map[*resource.Type]string{
	resource.Cluster:         "cds",
	resource.Endpoint:        "eds",
	resource.Listener:        "lds",
	resource.Route:           "rds",
	resource.ScopedRoute:     "srds",
	resource.VirtualHost:     "vhds",
	resource.Secret:          "sds",
	resource.Runtime:         "rtds",
	resource.ExtensionConfig: "ecds",
}

// FileName is the name of type t's file in format f: "cds.yaml",
// "eds.json", "lds.pb" and so on.
func FileName(t *resource.Type, f Format) string {
	n, ok := shortNames[t]
	if !ok {
		n = t.Name // a type added without a short name still gets a file
	}
	return n + "." + string(f)
}

// ResourceDir is the directory, under the export's, of the per-resource
// files of type t, which is not wildcard: "eds", "rds", "sds" and so on.
func ResourceDir(t *resource.Type) string {
	return strings.TrimSuffix(FileName(t, ""), ".")
}

// ResourceFileName is the name of the file of resource name in format f:
// the name path-escaped ('/' as %2F, so a name is one file), then the
// format's extension.
func ResourceFileName(name string, f Format) string {
	return url.PathEscape(name) + "." + string(f)
}

// resourceOfFile is the resource name a file named base holds in format
// f, if base is such a file.
func resourceOfFile(base string, f Format) (string, bool) {
	esc, ok := strings.CutSuffix(base, "."+string(f))
	if !ok || esc == "" {
		return "", false
	}
	name, err := url.PathUnescape(esc)
	if err != nil || url.PathEscape(name) != esc {
		return "", false
	}
	return name, true
}

// Encode encodes resp in format f. JSON and YAML are proto3 JSON with
// proto field names, the Any fields resolved through every Envoy type;
// binary proto is deterministic. The encoding of the same response is the
// same bytes.
func Encode(resp *discoveryv3.DiscoveryResponse, f Format) ([]byte, error) {
	if f == Proto {
		return proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(resp)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is deliberately unstable; normalise it.
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return nil, err
	}
	switch f {
	case JSON:
		return append(buf.Bytes(), '\n'), nil
	case YAML:
		return yaml.JSONToYAML(buf.Bytes())
	}
	return nil, fmt.Errorf("fsexport: unknown format %q", f)
}

// Decode decodes a file in format f, rejecting unknown fields, as Envoy
// reads it.
func Decode(b []byte, f Format) (*discoveryv3.DiscoveryResponse, error) {
	resp := new(discoveryv3.DiscoveryResponse)
	switch f {
	case Proto:
		return resp, proto.Unmarshal(b, resp)
	case YAML:
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, err
		}
		b = j
		fallthrough
	case JSON:
		return resp, protojson.Unmarshal(b, resp)
	}
	return nil, fmt.Errorf("fsexport: unknown format %q", f)
}
