package wire

import (
	"errors"
	"sync"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
)

// resourceNamesField is the field number of DiscoveryRequest's
// resource_names.
const resourceNamesField = 3

// errBadName is the error of a resource name that is not UTF-8, as proto3
// strings must be.
var errBadName = errors.New("wire: DiscoveryRequest.resource_names: a name is not valid UTF-8")

// unmarshalRequest decodes a SotW DiscoveryRequest into m as the proto
// codec does, but for its resource names: a SotW client repeats every
// name it subscribes to in each ACK (200 clusters' names, 10,000 clients,
// every push), and decoding them one string each was a fifth of a
// replica's CPU at 10,000 SotW streams and most of its garbage. Here each
// name is interned (a lookup, no allocation, for a name decoded before),
// and
// the rest of the message is decoded by the proto runtime in the runs of
// fields between the names (decoding concatenated parts of a message
// merges them, which is how protobuf defines the whole). A message that
// does not scan as protobuf is left to the proto codec, for its error.
func unmarshalRequest(b []byte, m *discoveryv3.DiscoveryRequest) (handled bool, err error) {
	var list []string
	opts := protobuf.UnmarshalOptions{Merge: true}
	from := 0 // the start of the run of other fields not decoded yet
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return false, nil
		}
		if num != resourceNamesField || typ != protowire.BytesType {
			v := protowire.ConsumeFieldValue(num, typ, b[i+n:])
			if v < 0 {
				return false, nil
			}
			i += n + v
			continue
		}
		name, v := protowire.ConsumeBytes(b[i+n:])
		if v < 0 {
			return false, nil
		}
		if !utf8.Valid(name) {
			return true, errBadName
		}
		if from < i {
			if err := opts.Unmarshal(b[from:i], m); err != nil {
				return true, err
			}
		}
		if list == nil {
			list = make([]string, 0, count(b[i:]))
		}
		list = append(list, intern(name))
		i += n + v
		from = i
	}
	if from < len(b) {
		if err := opts.Unmarshal(b[from:], m); err != nil {
			return true, err
		}
	}
	m.ResourceNames = append(m.ResourceNames, list...)
	return true, nil
}

// names is the table of interned resource names. It only grows, up to
// maxInterned bytes of names: beyond, names are copied per request as the
// proto runtime copies them, so clients sending ever new names cost no
// more memory than their requests do.
var names struct {
	mu    sync.RWMutex
	m     map[string]string
	bytes int
}

// maxInterned bounds the names interned: 16 MiB, some 500,000 names of
// the fleet's resources.
const maxInterned = 16 << 20

// count returns how many resource names b holds, for the list's
// capacity (a field it cannot scan ends the count).
func count(b []byte) int {
	n := 0
	for len(b) > 0 {
		num, typ, t := protowire.ConsumeTag(b)
		if t < 0 {
			break
		}
		v := protowire.ConsumeFieldValue(num, typ, b[t:])
		if v < 0 {
			break
		}
		if num == resourceNamesField && typ == protowire.BytesType {
			n++
		}
		b = b[t+v:]
	}
	return n
}

// intern returns b as a string shared with every other request's copy of
// it: the lookup reads b in place (no allocation); a name not in the
// table is copied once, and added while the table has room.
func intern(b []byte) string {
	names.mu.RLock()
	s, ok := names.m[string(b)]
	names.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	names.mu.Lock()
	defer names.mu.Unlock()
	if names.bytes+len(s) <= maxInterned {
		if names.m == nil {
			names.m = map[string]string{}
		}
		if _, ok := names.m[s]; !ok {
			names.m[s] = s
			names.bytes += len(s)
		}
	}
	return s
}
