package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Exits lists how every run of every process ended so far, oldest first.
func (c *Cluster) Exits() []Exit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.exits)
}

// BadExits describes each run that ended other than as this package
// ended it: on its own (a crash), unclean after SIGTERM, or killed after
// its Grace; each with the end of its log.
func (c *Cluster) BadExits() []string {
	var out []string
	for _, e := range c.Exits() {
		var why string
		switch {
		case e.Cause == "":
			why = "exited on its own"
		case e.Cause == causeStop && !e.Clean:
			why = "did not exit cleanly after SIGTERM"
		case e.Cause == causeStopKill:
			why = fmt.Sprintf("still ran %s after SIGTERM: killed", c.cfg.Grace)
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s (pid %d) %s: %s\n%s", e.Name, e.PID, why, e.Status, tailOf(e.Log, 30)))
	}
	return out
}

// LogProblems describes each replica whose log shows a data race (when
// built with -race) or a Go panic or fatal error, with the log from there.
func (c *Cluster) LogProblems() []string {
	var out []string
	for _, r := range c.Replicas() {
		b, err := os.ReadFile(r.Log)
		if err != nil {
			continue
		}
		log := string(b)
		for _, sign := range []string{"WARNING: DATA RACE", "\npanic: ", "\nfatal error: "} {
			at := strings.Index(log, sign)
			if at < 0 {
				continue
			}
			lines := strings.SplitN(log[at:], "\n", 81)
			out = append(out, fmt.Sprintf("%s's log (%s) shows %q:\n%s", r.Name, r.Log, strings.TrimSpace(sign),
				indent(strings.Join(lines[:min(len(lines), 80)], "\n"))))
			break
		}
	}
	return out
}

// Status describes the cluster now: addresses, and each process's state
// and pid. It does no I/O (Probe adds health).
type Status struct {
	Dir string `json:"dir"`
	Net string `json:"net"`
	// EtcdEndpoints are what the replicas use, host:port.
	EtcdEndpoints []string  `json:"etcd_endpoints"`
	Etcd          []Member  `json:"etcd,omitempty"`
	Replicas      []Replica `json:"replicas"`
	// HAProxy is nil without HAProxy.
	HAProxy *LB `json:"haproxy,omitempty"`
}

// Member is one etcd member.
type Member struct {
	Name       string `json:"name"`        // etcd-I, also its --name
	ClientAddr string `json:"client_addr"` // host:port
	PeerAddr   string `json:"peer_addr"`   // host:port
	DataDir    string `json:"data_dir"`
	Log        string `json:"log"` // its output, appended across runs
	PID        int    `json:"pid"` // of its current or last run; 0 if never started
	State      State  `json:"state"`
	Health     string `json:"health,omitempty"` // Probe's: "/health 200"
}

// Running reports whether its process exists (frozen counts).
func (m Member) Running() bool { return m.State != Gone }

// Replica is one xds-node replica.
type Replica struct {
	Name       string `json:"name"`        // replica-I, also its --name
	XDSAddr    string `json:"xds_addr"`    // gRPC, host:port
	HTTPAddr   string `json:"http_addr"`   // /readyz, /debug/..., host:port
	GossipAddr string `json:"gossip_addr"` // host:port
	Log        string `json:"log"`
	PID        int    `json:"pid"`
	State      State  `json:"state"`
	Health     string `json:"health,omitempty"` // Probe's: "/readyz 200"
}

// Running reports whether its process exists (frozen counts).
func (r Replica) Running() bool { return r.State != Gone }

// LB is HAProxy.
type LB struct {
	Name string `json:"name"`
	// XDSAddr is HAProxy's xDS address (TCP mode, round robin over the
	// replicas whose /readyz is 200).
	XDSAddr string `json:"xds_addr"`
	// HTTPAddr is HAProxy's address for the replicas' HTTP port.
	HTTPAddr string `json:"http_addr"`
	// StatsSocket is HAProxy's admin socket (LBServers).
	StatsSocket string `json:"stats_socket"`
	Config      string `json:"config"` // the generated haproxy.cfg
	Log         string `json:"log"`
	PID         int    `json:"pid"`
	// OldPIDs are HAProxy processes old reloads left serving their open
	// connections.
	OldPIDs []int  `json:"old_pids,omitempty"`
	State   State  `json:"state"`
	Health  string `json:"health,omitempty"` // Probe's: "/readyz via HAProxy 200"
	// Servers is HAProxy's view of each replica (Probe's): "xds/replica-1"
	// -> "UP".
	Servers map[string]string `json:"servers,omitempty"`
}

// Running reports whether its process exists (frozen counts).
func (l LB) Running() bool { return l.State != Gone }

// Status returns the cluster as it is now.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{Dir: c.cfg.Dir, Net: c.cfg.Net, EtcdEndpoints: c.etcdEndpoints()}
	runInfo := func(p *proc) (int, State) {
		if p.cur == nil {
			return 0, Gone
		}
		return p.cur.pid, p.cur.state()
	}
	for _, p := range c.etcd {
		ip := etcdIP(c.cfg.Net, p.index)
		m := Member{
			Name:       p.name,
			ClientAddr: hostPort(ip, etcdClientPort),
			PeerAddr:   hostPort(ip, etcdPeerPort),
			DataDir:    filepath.Join(c.cfg.Dir, p.name+".data"),
			Log:        p.log,
		}
		m.PID, m.State = runInfo(p)
		st.Etcd = append(st.Etcd, m)
	}
	for _, p := range c.replicas {
		ip := replicaIP(c.cfg.Net, p.index)
		r := Replica{
			Name:       p.name,
			XDSAddr:    hostPort(ip, xdsPort),
			HTTPAddr:   hostPort(ip, httpPort),
			GossipAddr: hostPort(ip, gossipPort),
			Log:        p.log,
		}
		r.PID, r.State = runInfo(p)
		st.Replicas = append(st.Replicas, r)
	}
	if c.lb != nil {
		ip := lbIP(c.cfg.Net)
		lb := &LB{
			Name:        c.lb.name,
			XDSAddr:     hostPort(ip, xdsPort),
			HTTPAddr:    hostPort(ip, httpPort),
			StatsSocket: lbSocket(c.cfg.Dir),
			Config:      c.lbConfigPath(),
			Log:         c.lb.log,
		}
		lb.PID, lb.State = runInfo(c.lb)
		for _, r := range c.oldLB {
			if r.alive() {
				lb.OldPIDs = append(lb.OldPIDs, r.pid)
			}
		}
		st.HAProxy = lb
	}
	return st
}

// Replicas returns Status().Replicas.
func (c *Cluster) Replicas() []Replica { return c.Status().Replicas }

// Etcd returns Status().Etcd.
func (c *Cluster) Etcd() []Member { return c.Status().Etcd }

// Names lists every process's name, etcd members first, then replicas,
// then HAProxy.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, p := range slices.Concat(c.etcd, c.replicas) {
		names = append(names, p.name)
	}
	if c.lb != nil {
		names = append(names, c.lb.name)
	}
	return names
}
