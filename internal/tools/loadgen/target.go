package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// Commit is a write a Target made: the version clients see it at, and
// when the write returned.
type Commit struct {
	// Version is what a response's version_info (SotW) or
	// system_version_info (delta) reaches once it carries the write: the
	// etcd revision for Legation, the snapshot version for go-control-plane.
	Version int64
	// Sent is when the write was sent (after its plan was read); latencies
	// are measured from it, so they include the write's own round trip.
	Sent time.Time
	// At is when the write returned to the load generator.
	At time.Time
}

// Target is where the scenario writes. Its methods are called from one
// goroutine.
type Target interface {
	// Seed writes the fixture, replacing whatever an earlier one held.
	Seed(ctx context.Context, fx fixture.Set) (Commit, error)
	// SetEndpoints replaces one cluster's endpoints.
	SetEndpoints(ctx context.Context, set fixture.EndpointSet) (Commit, error)
}

// StoreTarget writes to etcd through a store.Store, as xdsadmin apply
// does: one transaction per update.
type StoreTarget struct {
	Store *store.Store
	// Scope is the scope the fixture is written in. Empty: the default
	// scope, which every node sees.
	Scope string
}

func (t *StoreTarget) scope() string {
	if t.Scope == "" {
		return store.DefaultScope
	}
	return t.Scope
}

var _ Target = (*StoreTarget)(nil)

// Seed writes the fixture in one chunked apply (so a fixture beyond
// etcd's transaction limits is written in parts, clusters first), and
// deletes the fixture resources of an earlier, larger run (named as
// fixture.ClusterName, ListenerName and RouteName name them) that it does
// not name. Other resources are left alone.
func (t *StoreTarget) Seed(ctx context.Context, fx fixture.Set) (Commit, error) {
	puts, err := fx.Puts(t.scope())
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: %w", err)
	}
	named := make(map[store.Key]bool, len(puts))
	for _, p := range puts {
		named[p.Key] = true
	}
	var deletes []store.Key
	for _, typ := range []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route} {
		l, err := t.Store.List(ctx, store.ListOptions{Type: typ, Scope: t.scope()})
		if err != nil {
			return Commit{}, err
		}
		for _, r := range l.Resources {
			if strings.HasPrefix(r.Name, fixture.SetPrefix) && !named[r.Key] {
				deletes = append(deletes, r.Key)
			}
		}
	}
	return t.apply(ctx, store.PlanRequest{Puts: puts, Deletes: deletes}, true)
}

// SetEndpoints writes one ClusterLoadAssignment; it is an error if it is
// unchanged (no revision would carry it).
func (t *StoreTarget) SetEndpoints(ctx context.Context, set fixture.EndpointSet) (Commit, error) {
	p, err := fixture.Put(resource.Endpoint, t.scope(), set.LoadAssignment())
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: %w", err)
	}
	c, err := t.apply(ctx, store.PlanRequest{Puts: []store.Put{p}}, false)
	if err != nil {
		return Commit{}, err
	}
	if c.Version == 0 {
		return Commit{}, fmt.Errorf("loadgen: endpoints of %s are already what the update writes", set.Cluster)
	}
	return c, nil
}

// apply plans and applies req; Version is 0 when there was nothing to
// write, and the plan's revision for a seed.
func (t *StoreTarget) apply(ctx context.Context, req store.PlanRequest, seed bool) (Commit, error) {
	plan, err := t.Store.MakePlan(ctx, req)
	if err != nil {
		return Commit{}, err
	}
	sent := time.Now()
	res, err := t.Store.Apply(ctx, plan, store.ApplyOptions{Chunked: seed})
	if err != nil {
		return Commit{}, err
	}
	at := time.Now()
	if len(res.Revisions) == 0 && !seed {
		return Commit{Sent: sent, At: at}, nil
	}
	return Commit{Version: res.Revision, Sent: sent, At: at}, nil
}

// HTTPTarget writes through the control endpoint of the go-control-plane
// server of bench/gcp: POST /seed and POST /endpoints, JSON in, and
// {"version": N} out, N being the snapshot version the write made.
type HTTPTarget struct {
	// URL is the server's control base URL, as http://127.0.0.1:18101.
	URL    string
	Client *http.Client
}

var _ Target = (*HTTPTarget)(nil)

// ControlResponse is the body answered by POST /seed and /endpoints.
type ControlResponse struct {
	Version int64 `json:"version"`
}

// Seed posts the fixture to /seed.
func (t *HTTPTarget) Seed(ctx context.Context, fx fixture.Set) (Commit, error) {
	return t.post(ctx, "/seed", fx)
}

// SetEndpoints posts /endpoints.
func (t *HTTPTarget) SetEndpoints(ctx context.Context, set fixture.EndpointSet) (Commit, error) {
	return t.post(ctx, "/endpoints", set)
}

func (t *HTTPTarget) post(ctx context.Context, path string, body any) (Commit, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return Commit{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, bytes.NewReader(b))
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: control URL %q: %w", t.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := t.Client
	if c == nil {
		c = http.DefaultClient
	}
	sent := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %w", t.URL, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	at := time.Now()
	if err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %w", t.URL, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: %s: %s", t.URL, path, resp.Status, bytes.TrimSpace(out))
	}
	var cr ControlResponse
	if err := json.Unmarshal(out, &cr); err != nil {
		return Commit{}, fmt.Errorf("loadgen: POST %s%s: answer %q: %w", t.URL, path, out, err)
	}
	if cr.Version <= 0 {
		return Commit{}, errors.New("loadgen: POST " + t.URL + path + ": version " + strconv.FormatInt(cr.Version, 10) + " is not positive")
	}
	return Commit{Version: cr.Version, Sent: sent, At: at}, nil
}
