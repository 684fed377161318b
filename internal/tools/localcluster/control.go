package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// The control endpoint lets another process drive a cluster this one
// owns: `go run ./deploy/local up` serves it on ControlSocket(Dir), and
// `go run ./deploy/local status|kill|...` are its clients. It is HTTP on
// a Unix socket, which only the socket file's owner can reach:
//
//	GET  /status                 Probe's Status, JSON
//	POST /kill?name=NAME         Kill (stop, start, freeze, thaw alike)
//	POST /add-replica            AddReplica, the new Replica as JSON
//	POST /down                   asks the owner to stop everything and exit;
//	                             answers once it has (Done)
//
// Errors are a status other than 200 with the error's text as the body.

// ErrNotRunning is the Client's error when nothing answers on the control
// socket: no process owns a cluster in that directory.
var ErrNotRunning = errors.New("localcluster: no cluster runs there (nothing answers on its control socket)")

// ControlHandler serves c's control endpoint. onDown is called on a
// request to stop: the owner then stops everything (Close), and the
// request is answered once c is Done. Requests may come concurrently;
// each operation runs under the request's context.
func ControlHandler(c *Cluster, onDown func()) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, c.Probe(r.Context()))
	})
	ops := map[string]func(context.Context, string) error{
		"kill":   c.Kill,
		"stop":   c.Stop,
		"start":  c.Start,
		"freeze": func(_ context.Context, name string) error { return c.Freeze(name) },
		"thaw":   func(_ context.Context, name string) error { return c.Thaw(name) },
	}
	for op, do := range ops {
		mux.HandleFunc("POST /"+op, func(w http.ResponseWriter, r *http.Request) {
			if err := do(r.Context(), r.URL.Query().Get("name")); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			writeJSON(w, struct{}{})
		})
	}
	mux.HandleFunc("POST /add-replica", func(w http.ResponseWriter, r *http.Request) {
		rep, err := c.AddReplica(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, rep)
	})
	mux.HandleFunc("POST /down", func(w http.ResponseWriter, r *http.Request) {
		onDown()
		select {
		case <-c.Done():
			writeJSON(w, struct{}{})
		case <-r.Context().Done():
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

// Client talks to the control endpoint of the cluster whose state
// directory is dir. Its methods may be called concurrently; each waits
// for the owner's answer until ctx ends.
type Client struct {
	hc *http.Client
}

// NewClient returns a Client of the cluster in dir. It does no I/O.
func NewClient(dir string) *Client {
	sock := ControlSocket(dir)
	return &Client{hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}}
}

// Status returns the owner's Probe.
func (cl *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := cl.call(ctx, http.MethodGet, "/status", &st)
	return st, err
}

// Do runs op (kill, stop, start, freeze or thaw) on the process called
// name.
func (cl *Client) Do(ctx context.Context, op, name string) error {
	return cl.call(ctx, http.MethodPost, "/"+op+"?name="+url.QueryEscape(name), nil)
}

// AddReplica adds a replica and returns it.
func (cl *Client) AddReplica(ctx context.Context) (Replica, error) {
	var r Replica
	err := cl.call(ctx, http.MethodPost, "/add-replica", &r)
	return r, err
}

// Down asks the owner to stop everything and exit, and returns once it
// has stopped everything.
func (cl *Client) Down(ctx context.Context) error {
	return cl.call(ctx, http.MethodPost, "/down", nil)
}

func (cl *Client) call(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://localcluster"+path, nil)
	if err != nil {
		return err
	}
	resp, err := cl.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return ErrNotRunning
		}
		return fmt.Errorf("localcluster: control: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("localcluster: control: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("localcluster: control: %s: %w", path, err)
	}
	return nil
}
