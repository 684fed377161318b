package devetcd

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestStartPortTaken: a port taken by another process fails the start
// with an error Start recognizes (and retries, for a port it picked).
func TestStartPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = start(t.Context(), Config{Dir: t.TempDir(), ClientAddr: l.Addr().String()})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("start on a taken port: %v, want an error matching EADDRINUSE", err)
	}
	for _, tt := range []struct {
		cfg  Config
		want bool
	}{
		{Config{ClientAddr: "127.0.0.1:0"}, true},
		{Config{ClientAddr: "127.0.0.1:2379"}, true}, // the peer port is picked
		{Config{ClientAddr: "127.0.0.1:2379", PeerAddr: "127.0.0.1:2380"}, false},
		{Config{ClientAddr: "127.0.0.1:2379", PeerAddr: "127.0.0.1:0"}, true},
	} {
		if got := anyPort(tt.cfg); got != tt.want {
			t.Errorf("anyPort(%+v) = %v, want %v", tt.cfg, got, tt.want)
		}
	}
}
