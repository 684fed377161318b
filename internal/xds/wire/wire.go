// Package wire sends xDS responses as bytes encoded once and shared: a
// response body (everything but the nonce) is encoded once per distinct
// content and sent by every stream that sends the same, each stream adding
// only its nonce. It owns the gRPC codec that makes this possible and the
// cache of encoded bodies; it knows nothing of the protocol's rules.
package wire

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
)

// Response is a (Delta)DiscoveryResponse already encoded: a body shared by
// every stream that sends the same thing, and the stream's own nonce.
// Protobuf fields may come in any order, so body+nonce is a valid message.
type Response struct {
	body []byte // everything but the nonce: shared, never modified
	tail []byte // the nonce field: this stream's
}

// NonceField is the field number of the nonce in DiscoveryResponse and in
// DeltaDiscoveryResponse.
const NonceField = 5

// NewResponse returns body with nonce appended as field NonceField.
func NewResponse(body []byte, nonce string) *Response {
	tail := protowire.AppendTag(make([]byte, 0, len(nonce)+2), NonceField, protowire.BytesType)
	tail = protowire.AppendString(tail, nonce)
	return &Response{body: body, tail: tail}
}

// Size is the number of bytes the response puts on the wire (before gRPC
// framing).
func (r *Response) Size() int { return len(r.body) + len(r.tail) }

// Frame is one encoded protobuf message of any type, passed through
// without decoding: what a replica relays between a client and the
// client's home replica. Once sent, a Frame must not be modified (gRPC
// may write its bytes after SendMsg returns).
type Frame struct {
	// Bytes is the encoded message.
	Bytes []byte
}

// Codec is the gRPC codec xds-node's server must use
// (grpc.ForceServerCodecV2(wire.Codec{})): it sends a Response's bytes
// as they are and hands every other message to the standard proto codec.
// A *Frame goes both ways undecoded: Marshal sends its bytes as they are
// and Unmarshal into a *Frame copies the message's bytes into it. The same
// codec serves a client stream that relays Frames
// (grpc.ForceCodecV2(wire.Codec{})).
type Codec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch w := v.(type) {
	case *Response:
		return mem.BufferSlice{mem.SliceBuffer(w.body), mem.SliceBuffer(w.tail)}, nil
	case *Frame:
		return mem.BufferSlice{mem.SliceBuffer(w.Bytes)}, nil
	}
	return protoCodec.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *Frame:
		// A copy: gRPC reuses data's buffers once Unmarshal returns.
		m.Bytes = data.Materialize()
		return nil
	case *discoveryv3.DiscoveryRequest:
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		m.Reset()
		if handled, err := unmarshalRequest(buf.ReadOnlyData(), m); handled {
			return err
		}
	}
	return protoCodec.Unmarshal(data, v)
}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return proto.Name }

// Cache shares encoded response bodies among streams. It holds the bodies
// of one view revision; a newer revision replaces them. Its methods may be
// called concurrently.
type Cache struct {
	mu  sync.Mutex // guards rev, m
	rev int64
	m   map[string]*cachedBody

	// Encoded, if set, is called once per body encoded (a metric). Set it
	// before first use.
	Encoded func()
}

type cachedBody struct {
	once sync.Once
	body []byte
	err  error
}

// Get returns the body for key at rev, encoding the message build returns
// the first time. Bodies of older revisions are encoded without caching.
// Concurrent callers for one key wait for one encoding.
func (c *Cache) Get(rev int64, key string, build func() protobuf.Message) ([]byte, error) {
	c.mu.Lock()
	if rev > c.rev {
		c.rev, c.m = rev, map[string]*cachedBody{}
	}
	var cb *cachedBody
	if rev == c.rev {
		cb = c.m[key]
		if cb == nil {
			cb = &cachedBody{}
			c.m[key] = cb
		}
	} else {
		cb = &cachedBody{}
	}
	c.mu.Unlock()
	cb.once.Do(func() { cb.body, cb.err = c.Encode(build()) })
	return cb.body, cb.err
}

// Encode encodes a body that no other stream shares.
func (c *Cache) Encode(m protobuf.Message) ([]byte, error) {
	if c.Encoded != nil {
		c.Encoded()
	}
	return protobuf.Marshal(m)
}
