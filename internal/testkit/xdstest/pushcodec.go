package xdstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// pushMsg receives one DiscoveryResponse or DeltaDiscoveryResponse
// through pushCodec, which reads only what the benchmark checks.
type pushMsg struct {
	delta bool // a DeltaDiscoveryResponse

	// Set by each Unmarshal.
	size      int // message bytes
	resources int
	removed   int    // removed_resources (delta)
	version   []byte // version_info, or system_version_info in delta
	nonce     []byte
	name      []byte // the first resource's name (delta)

	r       mem.Reader // reused: no allocation per message
	scratch []byte     // the first resource (delta), read to find its name
}

// pushCodec is the clients' codec: requests go through the standard
// proto codec; a pushMsg is scanned field by field straight from gRPC's
// receive buffers, never copied whole (an initial response at 100,000
// clusters is 13 MB), which allocates nothing.
type pushCodec struct{}

var pushProtoCodec = encoding.GetCodecV2(grpcproto.Name)

func (pushCodec) Name() string { return grpcproto.Name }

func (pushCodec) Marshal(v any) (mem.BufferSlice, error) { return pushProtoCodec.Marshal(v) }

func (pushCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*pushMsg)
	if !ok {
		return pushProtoCodec.Unmarshal(data, v)
	}
	m.size = data.Len()
	m.r.Reset(data)
	defer m.r.Close()
	return m.scan()
}

// The fields read, the same numbers in both responses except removals.
const (
	pushFieldVersion   = 1 // version_info, system_version_info
	pushFieldResources = 2
	pushFieldNonce     = 5
	pushFieldRemoved   = 6 // delta's removed_resources (SotW's control_plane)
	pushFieldResName   = 3 // Resource.name (delta)
)

// scan reads the top-level fields of an encoded response from m.r.
func (m *pushMsg) scan() error {
	m.resources, m.removed = 0, 0
	m.version, m.nonce, m.name = m.version[:0], m.nonce[:0], m.name[:0]
	for m.r.Remaining() > 0 {
		tag, err := binary.ReadUvarint(&m.r)
		if err != nil {
			return err
		}
		num, typ := protowire.Number(tag>>3), protowire.Type(tag&7)
		switch typ {
		case protowire.VarintType:
			if _, err := binary.ReadUvarint(&m.r); err != nil {
				return err
			}
			continue
		case protowire.Fixed32Type:
			_, err = m.r.Discard(4)
		case protowire.Fixed64Type:
			_, err = m.r.Discard(8)
		case protowire.BytesType:
			err = m.field(num)
		default:
			err = fmt.Errorf("unexpected wire type %d", typ)
		}
		if err != nil {
			return err
		}
	}
	if len(m.nonce) == 0 {
		return errors.New("a response without a nonce")
	}
	return nil
}

// field reads one length-delimited field.
func (m *pushMsg) field(num protowire.Number) error {
	l, err := binary.ReadUvarint(&m.r)
	if err != nil {
		return err
	}
	n := int(l)
	switch {
	case num == pushFieldVersion:
		m.version, err = m.read(m.version, n)
		return err
	case num == pushFieldNonce:
		m.nonce, err = m.read(m.nonce, n)
		return err
	case num == pushFieldResources:
		m.resources++
		if m.delta && m.resources == 1 {
			if m.scratch, err = m.read(m.scratch[:0], n); err != nil {
				return err
			}
			m.name = append(m.name, pushResourceName(m.scratch)...)
			return nil
		}
	case num == pushFieldRemoved && m.delta:
		m.removed++
	}
	_, err = m.r.Discard(n)
	return err
}

// read appends the next n bytes of m.r to dst.
func (m *pushMsg) read(dst []byte, n int) ([]byte, error) {
	k := len(dst)
	dst = append(dst, make([]byte, n)...) // no allocation once dst has grown
	_, err := io.ReadFull(&m.r, dst[k:])
	return dst, err
}

// pushResourceName returns the name of an encoded delta Resource.
func pushResourceName(b []byte) []byte {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if typ == protowire.BytesType && num == pushFieldResName {
			v, _ := protowire.ConsumeBytes(b)
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil
		}
		b = b[n:]
	}
	return nil
}
