package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// pollInterval paces polls; it is not a wait for anything.
const pollInterval = 20 * time.Millisecond

// plainHTTP keeps no idle connections, so none outlive a wait.
var plainHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// httpGet GETs path from the plain HTTP server on addr (host:port),
// giving up after httpGetTimeout.
func httpGet(ctx context.Context, addr, path string) (int, string, error) {
	return get(ctx, plainHTTP, "http://"+addr+path)
}

// HTTPGet GETs path from the HTTP port of a replica or HAProxy at addr
// (host:port), giving up after httpGetTimeout: over HTTPS with the
// admin's certificate (Security.AdminTLS) in a secure cluster, else plain
// HTTP. It returns the status code and the body, failing when the body is
// above httpGetMaxBody.
func (c *Cluster) HTTPGet(ctx context.Context, addr, path string) (int, string, error) {
	c.mu.Lock()
	client, secure := c.http, c.sec != nil
	c.mu.Unlock()
	if c.cfg.Secure && !secure {
		return 0, "", errors.New("localcluster: HTTPGet: the secure cluster has not started")
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	return get(ctx, client, scheme+addr+path)
}

// httpGetTimeout bounds a GET; httpGetMaxBody bounds its body: room for
// /debug/streams of a replica with thousands of streams (about 1 KiB
// each).
const (
	httpGetTimeout = 5 * time.Second
	httpGetMaxBody = 64 << 20
)

func get(ctx context.Context, client *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, httpGetTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, httpGetMaxBody+1))
	if err == nil && len(body) > httpGetMaxBody {
		err = fmt.Errorf("localcluster: GET %s: body above %d bytes", url, httpGetMaxBody)
	}
	return resp.StatusCode, string(body), err
}

// poll calls cond until it holds, for up to Config.Timeout. It fails with
// cond's last word on why not and the end of log, or at once if exited
// (when not nil) is closed first: the process cond waits on has ended.
func (c *Cluster) poll(ctx context.Context, what, log string, exited <-chan struct{}, cond func(context.Context) (bool, string)) error {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ok, why := cond(tctx)
		if ok {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("localcluster: %s: the process exited first (%s)\n%s", what, c.exitStatus(exited), tailOf(log, 30))
		case <-tctx.Done():
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("localcluster: %s: %w", what, err)
			}
			return fmt.Errorf("localcluster: %s: not after %s; last: %s\n%s", what, c.cfg.Timeout, why, tailOf(log, 30))
		case <-tick.C:
		}
	}
}

// exitStatus is how the run whose done channel is done ended.
func (c *Cluster) exitStatus(done <-chan struct{}) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range slices.Concat(c.etcd, c.replicas, []*proc{c.lb}) {
		if p != nil && p.cur != nil && p.cur.done == done && p.cur.exit != nil {
			return p.cur.exit.Status
		}
	}
	return "ended"
}

// waitHealthy waits until p's current run answers 200: an etcd member on
// /health, a replica on /readyz.
func (c *Cluster) waitHealthy(ctx context.Context, p *proc) error {
	c.mu.Lock()
	r := p.cur
	c.mu.Unlock()
	if r == nil {
		return fmt.Errorf("localcluster: %s was never started", p.name)
	}
	var addr, path string
	getter, scheme := c.HTTPGet, "http://"
	if c.cfg.Secure {
		scheme = "https://"
	}
	switch p.kind {
	case kindEtcd:
		addr, path, getter, scheme = etcdHealthAddr(&c.cfg, p.index), "/health", httpGet, "http://"
	case kindReplica:
		addr, path = hostPort(replicaIP(c.cfg.Net, p.index), httpPort), "/readyz"
	default:
		addr, path = hostPort(lbIP(c.cfg.Net), httpPort), "/readyz"
	}
	what := fmt.Sprintf("%s (pid %d): %s%s%s 200", p.name, r.pid, scheme, addr, path)
	return c.poll(ctx, what, p.log, r.done, func(ctx context.Context) (bool, string) {
		code, body, err := getter(ctx, addr, path)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
	})
}

// etcdHealthAddr is where etcd member i answers /health in plain HTTP:
// its client address, or with TLS its metrics address.
func etcdHealthAddr(cfg *Config, i int) string {
	if etcdTLS(cfg) != nil {
		return hostPort(etcdIP(cfg.Net, i), etcdMetricsPort)
	}
	return hostPort(etcdIP(cfg.Net, i), etcdClientPort)
}

// WaitRevision waits until the view of every running replica is at etcd
// revision rev or later (its /debug/view), so that a client connecting to
// any of them is served what was written at rev. Each replica gets
// Config.Timeout.
func (c *Cluster) WaitRevision(ctx context.Context, rev int64) error {
	for _, r := range c.Replicas() {
		if !r.Running() {
			continue
		}
		err := c.poll(ctx, fmt.Sprintf("%s's view at revision %d", r.Name, rev), r.Log, nil, func(ctx context.Context) (bool, string) {
			var v struct {
				Revision int64 `json:"revision"`
			}
			if err := c.getJSON(ctx, r.HTTPAddr, "/debug/view", &v); err != nil {
				return false, err.Error()
			}
			return v.Revision >= rev, fmt.Sprintf("at revision %d", v.Revision)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitRing waits until every running replica's ring (its /debug/cluster)
// is exactly the running replicas: after a kill, a stop, a start or an
// add, the moment from which streams land on their settled homes. Each
// replica gets Config.Timeout.
func (c *Cluster) WaitRing(ctx context.Context) error {
	var want []string
	running := slices.DeleteFunc(c.Replicas(), func(r Replica) bool { return !r.Running() })
	for _, r := range running {
		want = append(want, r.Name)
	}
	sort.Strings(want)
	for _, r := range running {
		err := c.poll(ctx, fmt.Sprintf("%s's ring of %v", r.Name, want), r.Log, nil, func(ctx context.Context) (bool, string) {
			var v struct {
				Ring []string `json:"ring"`
			}
			if err := c.getJSON(ctx, r.HTTPAddr, "/debug/cluster", &v); err != nil {
				return false, err.Error()
			}
			sort.Strings(v.Ring)
			return slices.Equal(v.Ring, want), fmt.Sprintf("ring %v", v.Ring)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// WaitLB waits until HAProxy has marked the replica called name up (or
// down) in both its backends, xDS and HTTP: HAProxy checks /readyz every
// 500ms, and marks a replica down after 2 failures, up after 1 success.
func (c *Cluster) WaitLB(ctx context.Context, name string, up bool) error {
	if c.lb == nil {
		return errors.New("localcluster: WaitLB: no HAProxy in this cluster")
	}
	p, err := c.find(name)
	if err != nil {
		return err
	}
	if p.apart {
		return fmt.Errorf("localcluster: WaitLB: %s is kept out of HAProxy (ReplicaOptions.Apart)", name)
	}
	want := "DOWN"
	if up {
		want = "UP"
	}
	return c.poll(ctx, fmt.Sprintf("HAProxy marks %s %s", name, want), p.log, nil, func(ctx context.Context) (bool, string) {
		states, err := c.LBServers(ctx)
		if err != nil {
			return false, err.Error()
		}
		var got []string
		ok := true
		for _, backend := range []string{"xds", "http"} {
			st := states[backend+"/"+name]
			got = append(got, fmt.Sprintf("%s/%s %q", backend, name, st))
			// "DOWN 1/2" is a server going up, "UP 1/2" one going down.
			if up && st != "UP" || !up && !strings.HasPrefix(st, "DOWN") {
				ok = false
			}
		}
		return ok, strings.Join(got, ", ")
	})
}

// getJSON GETs path from addr (HTTPGet) and decodes its JSON body into v.
func (c *Cluster) getJSON(ctx context.Context, addr, path string, v any) error {
	code, body, err := c.HTTPGet(ctx, addr, path)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %v %.200s", path, code, err, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// Probe returns Status with each running process's health: an etcd
// member's /health, a replica's /readyz, /readyz through HAProxy, and
// HAProxy's view of each replica. It probes them all at once, each for
// up to 2s.
func (c *Cluster) Probe(ctx context.Context) Status {
	st := c.Status()
	type probe struct {
		health     *string
		get        func(ctx context.Context, addr, path string) (int, string, error)
		addr, path string
		label      string
	}
	var probes []probe
	for i, m := range st.Etcd {
		if m.State == Running {
			probes = append(probes, probe{&st.Etcd[i].Health, httpGet, etcdHealthAddr(&c.cfg, i+1), "/health", "/health"})
		}
	}
	for i, r := range st.Replicas {
		if r.State == Running {
			probes = append(probes, probe{&st.Replicas[i].Health, c.HTTPGet, r.HTTPAddr, "/readyz", "/readyz"})
		}
	}
	lb := st.HAProxy
	if lb != nil && lb.State == Running {
		probes = append(probes, probe{&lb.Health, c.HTTPGet, lb.HTTPAddr, "/readyz", "/readyz via HAProxy"})
	}
	done := make(chan struct{})
	for _, p := range probes {
		go func() {
			defer func() { done <- struct{}{} }()
			code, _, err := p.get(ctx, p.addr, p.path)
			if err != nil {
				*p.health = p.label + " no answer"
				return
			}
			*p.health = fmt.Sprintf("%s %d", p.label, code)
		}()
	}
	if lb != nil && lb.State == Running {
		if servers, err := c.LBServers(ctx); err == nil {
			lb.Servers = servers
		}
	}
	for range probes {
		<-done
	}
	return st
}
