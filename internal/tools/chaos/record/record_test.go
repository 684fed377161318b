package record_test

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/chaos/record"
)

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func TestWriterReadEventsRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := record.NewWriter(nopCloser{&b})
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w.Record(&record.Event{Kind: record.KindStart, Time: at, Client: "c", Stream: 1, Mode: record.ModeDelta})
	w.Record(&record.Event{Kind: record.KindResponse, Time: at, Client: "c", Stream: 1, Mode: record.ModeDelta,
		Type: "t", Resources: []record.Resource{{Name: "a", Version: "2", Hash: record.BodyHash([]byte("x"))}}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w.Events(); got != 2 {
		t.Errorf("Events() = %d, want 2", got)
	}
	es, err := record.ReadEvents(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[1].Line != 2 || es[1].Resources[0].Hash != record.BodyHash([]byte("x")) {
		t.Errorf("read back %+v", es)
	}
}

func TestReadEventsNamesTheBadLine(t *testing.T) {
	in := `{"kind":"start","client":"c","stream":1,"mode":"sotw"}` + "\n" +
		`{"kind":"response","client":"c","stream":1,"mode":"sotw"}` + "\n"
	_, err := record.ReadEvents(strings.NewReader(in))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ReadEvents = %v, want an error naming line 2", err)
	}
}
