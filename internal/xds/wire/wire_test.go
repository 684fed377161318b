package wire_test

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/legation-io/legation/internal/xds/wire"
)

func TestCodecFrame(t *testing.T) {
	req := &discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: "n1", Cluster: "c"},
		TypeUrl:       "type.googleapis.com/envoy.config.cluster.v3.Cluster",
		ResourceNames: []string{"a", "b"},
	}
	enc, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var c wire.Codec

	t.Run("marshal sends the bytes as they are", func(t *testing.T) {
		got, err := c.Marshal(&wire.Frame{Bytes: enc})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), enc) {
			t.Errorf("Marshal(Frame) = %x, want %x", got.Materialize(), enc)
		}
	})

	t.Run("unmarshal copies without decoding", func(t *testing.T) {
		buf := bytes.Clone(enc)
		// Two buffers, as gRPC may hand a message split over frames.
		data := mem.BufferSlice{mem.SliceBuffer(buf[:3]), mem.SliceBuffer(buf[3:])}
		var f wire.Frame
		if err := c.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		for i := range buf {
			buf[i] = 0xff // gRPC reuses its buffers: the frame must not see it
		}
		if !bytes.Equal(f.Bytes, enc) {
			t.Fatalf("Unmarshal(Frame) = %x, want %x", f.Bytes, enc)
		}
		got := &discoveryv3.DiscoveryRequest{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(f.Bytes)}, got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, got, protocmp.Transform()); diff != "" {
			t.Errorf("decoded frame (-want +got):\n%s", diff)
		}
	})

	t.Run("garbage is a frame too", func(t *testing.T) {
		// A Frame is never decoded, so undecodable bytes pass; whoever
		// decodes them reports the error.
		var f wire.Frame
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, &f); err != nil {
			t.Fatal(err)
		}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, &discoveryv3.DiscoveryRequest{}); err == nil {
			t.Error("Unmarshal of garbage into a DiscoveryRequest: no error")
		}
	})

	t.Run("empty frame", func(t *testing.T) {
		var f wire.Frame
		if err := c.Unmarshal(mem.BufferSlice{}, &f); err != nil {
			t.Fatal(err)
		}
		got, err := c.Marshal(&f)
		if err != nil {
			t.Fatal(err)
		}
		if got.Len() != 0 {
			t.Errorf("Marshal(empty Frame) has %d bytes", got.Len())
		}
	})

	t.Run("responses and messages unchanged", func(t *testing.T) {
		got, err := c.Marshal(wire.NewResponse([]byte{0x0a, 0x01, '7'}, "n"))
		if err != nil {
			t.Fatal(err)
		}
		resp := &discoveryv3.DiscoveryResponse{}
		if err := proto.Unmarshal(got.Materialize(), resp); err != nil {
			t.Fatal(err)
		}
		if resp.GetVersionInfo() != "7" || resp.GetNonce() != "n" {
			t.Errorf("Response decodes to version %q nonce %q, want 7 and n", resp.GetVersionInfo(), resp.GetNonce())
		}
		m, err := c.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Materialize(), enc) {
			t.Error("Marshal(DiscoveryRequest) differs from proto.Marshal")
		}
	})
}
