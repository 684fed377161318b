package record

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"sync"
	"time"
)

// Event kinds.
const (
	KindStart    = "start"    // a stream opened
	KindResponse = "response" // a response received
	KindEnd      = "end"      // a stream ended
)

// Stream modes.
const (
	ModeSotW  = "sotw"
	ModeDelta = "delta"
)

// Resource is a resource a response carried and its version: on delta
// the Resource.version (the key's mod revision); on SotW the response's
// version_info. Hash is BodyHash of its bytes (empty: not compared).
type Resource struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Hash    string `json:"hash,omitempty"`
}

// Event is one line of a recording: a stream's start or end, or a
// response received on it. A stream is (Client, Stream): Stream counts
// the client's streams from 1.
type Event struct {
	Kind   string    `json:"kind"`
	Time   time.Time `json:"time"`
	Client string    `json:"client"`
	Stream int64     `json:"stream"`
	Mode   string    `json:"mode"`

	// Type, Version (SotW version_info, delta system_version_info),
	// Nonce, Resources and Removed (delta) describe a response.
	Type      string     `json:"type,omitempty"`
	Version   string     `json:"version,omitempty"`
	Nonce     string     `json:"nonce,omitempty"`
	Resources []Resource `json:"resources,omitempty"`
	Removed   []string   `json:"removed,omitempty"`

	// Presented is, on a start, what the stream's first requests present
	// per type URL: SotW the version_info under the name "" (the
	// response's version), delta the initial_resource_versions. Empty
	// when the client presents nothing (a fresh client).
	Presented map[string]map[string]string `json:"presented,omitempty"`

	// Error is, on an end, why the stream ended.
	Error string `json:"error,omitempty"`

	// Line is the event's line in its file, from 1 (set by ReadEvents).
	Line int `json:"-"`
}

// Writer writes events as JSON Lines through a buffer of bounded size.
// Record may be called from any goroutine; it blocks while the buffer is
// flushed to the file.
type Writer struct {
	mu  sync.Mutex // guards all below
	f   io.WriteCloser
	bw  *bufio.Writer
	enc *json.Encoder
	err error // the first write error, returned by Close
	n   int64
}

// writerBuffer bounds the memory a Writer holds: events go to the file
// once this much is buffered.
const writerBuffer = 256 << 10

// Create creates (or truncates) path and returns a Writer to it.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: recording: %w", err)
	}
	return NewWriter(f), nil
}

// NewWriter returns a Writer to w, which Close closes.
func NewWriter(w io.WriteCloser) *Writer {
	bw := bufio.NewWriterSize(w, writerBuffer)
	return &Writer{f: w, bw: bw, enc: json.NewEncoder(bw)}
}

// Record writes e. After a write error it drops events; Close returns the
// error.
func (w *Writer) Record(e *Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.f == nil {
		return
	}
	if err := w.enc.Encode(e); err != nil {
		w.err = fmt.Errorf("chaos: recording: %w", err)
		return
	}
	w.n++
}

// Events returns the number of events written.
func (w *Writer) Events() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Close flushes and closes the file; it returns the first error of any
// write. Later calls return nil and later Records are dropped.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.err
	if ferr := w.bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("chaos: recording: %w", ferr)
	}
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("chaos: recording: %w", cerr)
	}
	w.f = nil
	return err
}

// ReadEvents reads a recording; errors name the line.
func ReadEvents(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var out []Event
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("chaos: recording line %d: %w", line, err)
		}
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("chaos: recording line %d: %w", line, err)
		}
		e.Line = line
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: recording line %d: %w", line+1, err)
	}
	return out, nil
}

// ReadEventsFile reads the recording at path.
func ReadEventsFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	es, err := ReadEvents(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

func (e *Event) validate() error {
	switch e.Kind {
	case KindStart, KindEnd:
	case KindResponse:
		if e.Type == "" {
			return errors.New("response: no type")
		}
	default:
		return fmt.Errorf("kind %q: want start, response or end", e.Kind)
	}
	if e.Client == "" {
		return errors.New("no client")
	}
	if e.Stream < 1 {
		return fmt.Errorf("stream %d: must be positive", e.Stream)
	}
	if e.Mode != ModeSotW && e.Mode != ModeDelta {
		return fmt.Errorf("mode %q: want sotw or delta", e.Mode)
	}
	return nil
}

// BodyHash is the hash of a resource's bytes that recordings and the
// history carry (FNV-1a, 64 bits, in hex): the bytes a client receives
// are the ones stored in etcd.
func BodyHash(b []byte) string {
	f := fnv.New64a()
	f.Write(b)
	return strconv.FormatUint(f.Sum64(), 16)
}
