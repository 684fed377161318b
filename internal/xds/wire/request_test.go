package wire_test

import (
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/xds/wire"
)

// sotwACK is a SotW ACK as Envoy sends it: the version, every name it
// subscribes to, the type and the nonce.
func sotwACK(names int) *discoveryv3.DiscoveryRequest {
	r := &discoveryv3.DiscoveryRequest{VersionInfo: "42", TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", ResponseNonce: "17"}
	for i := range names {
		r.ResourceNames = append(r.ResourceNames, fmt.Sprintf("lg-cluster-%05d", i))
	}
	return r
}

// decode decodes b with the codec.
func decode(b []byte) (*discoveryv3.DiscoveryRequest, error) {
	var got discoveryv3.DiscoveryRequest
	err := wire.Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
	return &got, err
}

// TestUnmarshalRequest: a DiscoveryRequest decodes as the proto runtime
// decodes it, the names in order, whatever the order of the fields; a
// name that is not UTF-8 is an error, as it is for proto.
func TestUnmarshalRequest(t *testing.T) {
	full := sotwACK(3)
	full.Node = &corev3.Node{Id: "n", Cluster: "c"}
	full.ErrorDetail = &status.Status{Code: 3, Message: "bad"}
	b, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	// The same fields with the names split by others (Marshal puts them
	// together; another client need not).
	var split []byte
	split = protowire.AppendTag(split, 3, protowire.BytesType)
	split = protowire.AppendString(split, "b")
	split = protowire.AppendTag(split, 1, protowire.BytesType)
	split = protowire.AppendString(split, "7")
	split = protowire.AppendTag(split, 3, protowire.BytesType)
	split = protowire.AppendString(split, "a")
	split = protowire.AppendTag(split, 1, protowire.BytesType)
	split = protowire.AppendString(split, "8") // the last version wins
	split = protowire.AppendTag(split, 3, protowire.BytesType)
	split = protowire.AppendString(split, "")
	for name, in := range map[string][]byte{"marshaled": b, "split": split, "empty": nil} {
		got, err := decode(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want discoveryv3.DiscoveryRequest
		if err := proto.Unmarshal(in, &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: decoded differently from proto (-proto +codec):\n%s", name, diff)
		}
	}
	bad := protowire.AppendTag(nil, 3, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0xff, 'x'})
	if _, err := decode(bad); err == nil {
		t.Error("a name that is not UTF-8 decoded without an error")
	}
	if _, err := decode([]byte{0x1a, 0x05, 'a'}); err == nil {
		t.Error("a truncated name decoded without an error")
	}
}

// TestUnmarshalRequestSharesLists: an ACK naming what an earlier request
// named is given that request's list, the same slice, so that a stream
// can tell by its identity that the names did not change; a list that
// differs in one name, or in their order, is a list of its own; and an
// append to a shared list does not change it.
func TestUnmarshalRequestSharesLists(t *testing.T) {
	ack := sotwACK(200)
	ack.TypeUrl = "type.googleapis.com/test.SharesLists" // names no other test sends
	ack.ResourceNames[7] = "shares-lists-test"
	first, err := proto.Marshal(ack)
	if err != nil {
		t.Fatal(err)
	}
	a, err := decode(first)
	if err != nil {
		t.Fatal(err)
	}
	ack.VersionInfo, ack.ResponseNonce = "43", "18" // the next ACK: the same names
	next, _ := proto.Marshal(ack)
	b, err := decode(next)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ack, b, protocmp.Transform()); diff != "" {
		t.Fatalf("second ACK decoded wrong (-sent +decoded):\n%s", diff)
	}
	if &a.ResourceNames[0] != &b.ResourceNames[0] {
		t.Error("two ACKs naming the same list were given two lists")
	}

	ack.ResourceNames = append([]string(nil), ack.ResourceNames...)
	ack.ResourceNames[199] = "shares-lists-other"
	other, _ := proto.Marshal(ack)
	ack.ResourceNames[199], ack.ResourceNames[198] = ack.ResourceNames[198], ack.ResourceNames[199]
	swapped, _ := proto.Marshal(ack)
	for name, in := range map[string][]byte{"one name changed": other, "order changed": swapped} {
		c, err := decode(in)
		if err != nil {
			t.Fatal(err)
		}
		var want discoveryv3.DiscoveryRequest
		if err := proto.Unmarshal(in, &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&want, c, protocmp.Transform()); diff != "" {
			t.Errorf("%s: decoded differently from proto (-proto +codec):\n%s", name, diff)
		}
		if &c.ResourceNames[0] == &a.ResourceNames[0] {
			t.Errorf("%s: given the first list", name)
		}
	}

	grown := append(b.ResourceNames, "appended")
	c, _ := decode(next)
	if len(c.ResourceNames) != 200 || &grown[0] == &c.ResourceNames[0] {
		t.Errorf("an append to a shared list changed it: %d names", len(c.ResourceNames))
	}
}

// FuzzUnmarshalRequest: whatever the bytes, the codec decodes a
// DiscoveryRequest exactly as the proto runtime does, or fails where it
// fails.
func FuzzUnmarshalRequest(f *testing.F) {
	b, _ := proto.Marshal(sotwACK(3))
	f.Add(b)
	f.Add([]byte{0x1a, 0x01, 'a', 0x0a, 0x01, '1', 0x1a, 0x00})
	f.Add([]byte{0x1a, 0x02, 0xff, 0xfe})
	f.Add([]byte{0x1b, 0x1c})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := decode(in)
		var want discoveryv3.DiscoveryRequest
		werr := proto.Unmarshal(in, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("codec error %v, proto error %v", err, werr)
		}
		if err == nil && !proto.Equal(&want, got) {
			t.Fatalf("decoded differently: proto %v, codec %v", &want, got)
		}
		// Again: now its names may be a list decoded before.
		again, err := decode(in)
		if (err == nil) != (werr == nil) {
			t.Fatalf("second decode: codec error %v, proto error %v", err, werr)
		}
		if err == nil && !proto.Equal(&want, again) {
			t.Fatalf("second decode differs: proto %v, codec %v", &want, again)
		}
	})
}

// BenchmarkUnmarshalRequest decodes a SotW ACK naming 200 clusters, with
// the codec (its list decoded before, as an ACK's is: shared) and with
// the proto codec.
func BenchmarkUnmarshalRequest(b *testing.B) {
	in, err := proto.Marshal(sotwACK(200))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r discoveryv3.DiscoveryRequest
			if err := proto.Unmarshal(in, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
