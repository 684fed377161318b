package wire

import (
	"errors"
	"hash/maphash"
	"sync"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
)

// resourceNamesField is the field number of DiscoveryRequest's
// resource_names, and namesTag its tag byte (field 3, length-delimited).
const (
	resourceNamesField = 3
	namesTag           = resourceNamesField<<3 | byte(protowire.BytesType)
)

// errBadName is the error of a resource name that is not UTF-8, as proto3
// strings must be.
var errBadName = errors.New("wire: DiscoveryRequest.resource_names: a name is not valid UTF-8")

// unmarshalRequest decodes a SotW DiscoveryRequest into m as the proto
// codec does, but for its resource names: a SotW client repeats every
// name it subscribes to in each ACK (200 clusters' names, 10,000 clients,
// every push), and decoding them one string each was a fifth of a
// replica's CPU at 10,000 SotW streams and most of its garbage.
//
// So whole lists are shared: the names of a request, when they come
// together (as every protobuf library writes them), are looked up by the
// hash of their bytes in a table of the lists decoded before, and a list
// found there decoded from the same bytes is the request's
// ResourceNames, shared with every other request that named the same
// (no allocation, no per-name lookup). The list is shared: its readers
// must not change it (nothing in the replica does), and a stream may
// tell by its identity that a request repeats the names of the last one.
// A list not found is decoded with each name interned (a lookup, no
// allocation, for a name decoded before), then added to the table.
//
// The rest of the message is decoded by the proto runtime in the runs of
// fields around the names (decoding concatenated parts of a message
// merges them, which is how protobuf defines the whole). A message that
// does not scan as protobuf is left to the proto codec, for its error.
func unmarshalRequest(b []byte, m *discoveryv3.DiscoveryRequest) (handled bool, err error) {
	start, end, n, ok := namesRun(b)
	if !ok {
		return false, nil
	}
	together := n > 0 && end > 0
	if together {
		if l := listed(b[start:end]); l != nil {
			return true, unmarshalShared(b, start, end, m, l)
		}
	}
	list, err := decodeNames(b, n, m)
	if err != nil {
		return true, err
	}
	if together {
		list = list[:n:n] // an append to the shared list copies it
		addList(b[start:end], list)
	}
	m.ResourceNames = list
	return true, nil
}

// merging decodes a run of a message's fields into what was decoded of
// the message before.
var merging = protobuf.UnmarshalOptions{Merge: true}

// unmarshalShared decodes the fields of b around its run of names
// [start, end) into m, and gives m the shared list l of those names.
func unmarshalShared(b []byte, start, end int, m *discoveryv3.DiscoveryRequest, l []string) error {
	if err := merging.Unmarshal(b[:start], m); err != nil {
		return err
	}
	if err := merging.Unmarshal(b[end:], m); err != nil {
		return err
	}
	m.ResourceNames = l
	return nil
}

// decodeNames decodes b, which namesRun scanned and found n names in: the
// runs of other fields into m by the proto runtime, and the names, each
// interned, into the list it returns. Names decoded for the first time
// are interned once all are read.
func decodeNames(b []byte, n int, m *discoveryv3.DiscoveryRequest) ([]string, error) {
	var list []string
	if n > 0 {
		list = make([]string, 0, n)
	}
	var added []string // names not interned before
	from := 0          // the start of the run of other fields not decoded yet
	names.mu.RLock()
	for i := 0; i < len(b); {
		// namesRun scanned b: every field here is whole.
		num, typ, t := protowire.ConsumeTag(b[i:])
		v := protowire.ConsumeFieldValue(num, typ, b[i+t:])
		if num != resourceNamesField || typ != protowire.BytesType {
			i += t + v
			continue
		}
		name, _ := protowire.ConsumeBytes(b[i+t:])
		s, ok := names.m[string(name)] // interned names are valid UTF-8
		if !ok {
			if !utf8.Valid(name) {
				names.mu.RUnlock()
				return nil, errBadName
			}
			s = string(name)
			added = append(added, s)
		}
		if from < i {
			if err := merging.Unmarshal(b[from:i], m); err != nil {
				names.mu.RUnlock()
				return nil, err
			}
		}
		list = append(list, s)
		i += t + v
		from = i
	}
	names.mu.RUnlock()
	if from < len(b) {
		if err := merging.Unmarshal(b[from:], m); err != nil {
			return nil, err
		}
	}
	intern(added)
	return list, nil
}

// namesRun scans b as protobuf fields: n is how many resource names it
// holds, and when there are some and they come together, [start, end) is
// their run (end 0 when other fields come between them). ok is false when
// b does not scan.
func namesRun(b []byte) (start, end, n int, ok bool) {
	split := false
	for i := 0; i < len(b); {
		var t, v int
		if b[i] == namesTag && i+1 < len(b) && b[i+1] < 0x80 {
			// The common case, read without the general decoder: a name
			// of fewer than 128 bytes (a one-byte length).
			t, v = 1, 1+int(b[i+1])
			if i+t+v > len(b) {
				return 0, 0, 0, false
			}
		} else {
			num, typ, tl := protowire.ConsumeTag(b[i:])
			if tl < 0 {
				return 0, 0, 0, false
			}
			t, v = tl, protowire.ConsumeFieldValue(num, typ, b[i+tl:])
			if v < 0 {
				return 0, 0, 0, false
			}
			if num != resourceNamesField || typ != protowire.BytesType {
				i += t + v
				continue
			}
		}
		switch {
		case n == 0:
			start = i
		case end != i:
			split = true
		}
		n++
		end = i + t + v
		i += t + v
	}
	if split {
		end = 0
	}
	return start, end, n, true
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

// intern adds the names decoded for the first time to the table, while
// it has room.
func intern(added []string) {
	if len(added) == 0 {
		return
	}
	names.mu.Lock()
	defer names.mu.Unlock()
	for _, s := range added {
		if names.bytes+len(s) > maxInterned {
			return
		}
		if names.m == nil {
			names.m = map[string]string{}
		}
		if _, ok := names.m[s]; !ok {
			names.m[s] = s
			names.bytes += len(s)
		}
	}
}

// lists is the table of shared name lists, by the hash of their run of
// fields, each with a copy of that run. It holds at most maxListed bytes
// (the runs and 16 bytes a name, the strings themselves being interned):
// when a list would take it past that, it starts over empty, and the
// lists in use come back with their next requests.
var lists struct {
	mu    sync.RWMutex
	m     map[uint64]*list
	bytes int
}

// list is a shared list of names and the run of fields it was decoded
// from.
type list struct {
	run   string
	names []string
}

const maxListed = 16 << 20

var listSeed = maphash.MakeSeed()

// listed returns the shared list of the names in run, if the table has
// it.
func listed(run []byte) []string {
	h := maphash.Bytes(listSeed, run)
	lists.mu.RLock()
	l := lists.m[h]
	lists.mu.RUnlock()
	if l == nil || l.run != string(run) { // not there, or another run of the same hash
		return nil
	}
	return l.names
}

// addList adds names, decoded from run, to the table.
func addList(run []byte, names []string) {
	h := maphash.Bytes(listSeed, run)
	size := len(run) + 16*len(names)
	lists.mu.Lock()
	defer lists.mu.Unlock()
	if _, ok := lists.m[h]; ok {
		return
	}
	if lists.bytes+size > maxListed {
		lists.m, lists.bytes = nil, 0
	}
	if lists.m == nil {
		lists.m = map[uint64]*list{}
	}
	lists.m[h] = &list{run: string(run), names: names}
	lists.bytes += size
}
