package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/legation-io/legation/internal/tools/faultnet"
)

// kind is what a process is.
type kind int

const (
	kindEtcd kind = iota
	kindReplica
	kindHAProxy
)

// proc is one named process of the cluster (etcd-I, replica-I, haproxy),
// across its runs.
type proc struct {
	name  string
	kind  kind
	index int    // I in etcd-I and replica-I, from 1; 0 for haproxy
	log   string // its output, appended across runs
	// args, if set, rewrites a replica's command line at each start
	// (ReplicaOptions.Args); apart keeps it out of HAProxy
	// (ReplicaOptions.Apart). Both set before the proc is shared.
	args  func([]string) []string
	apart bool

	// A replica's fault proxies (Config.EtcdProxies, GossipProxies), made
	// at its first start; guarded by Cluster.mu.
	etcdProxies faultnet.Group
	gossip      *faultnet.GossipProxy

	cur *run // guarded by Cluster.mu; nil until its first start
}

// run is one run of a process: from its start to cmd.Wait's return.
type run struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once cmd.Wait has returned and exit is set

	// Guarded by Cluster.mu.
	frozen bool   // sent SIGSTOP and not SIGCONT since
	cause  string // what this package did to end it (Exit.Cause); "" until then
	exit   *Exit  // set when done is closed
}

// Why a run ended, as far as this package made it (Exit.Cause).
const (
	causeKill     = "kill"      // SIGKILL (Kill)
	causeStop     = "stop"      // SIGTERM (Stop, Down)
	causeStopKill = "stop+kill" // SIGTERM, then SIGKILL after Config.Grace
	causeReload   = "reload"    // an old HAProxy, told by its successor to finish
)

// alive reports whether r has not ended. The caller holds Cluster.mu or
// owns r.
func (r *run) alive() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// State is what a process is doing.
type State string

const (
	// Running: the process runs (it may still be starting up).
	Running State = "running"
	// Frozen: the process was sent SIGSTOP (Freeze): it neither answers
	// nor exits until Thaw.
	Frozen State = "frozen"
	// Gone: never started, or ended.
	Gone State = "gone"
)

func (r *run) state() State {
	switch {
	case !r.alive():
		return Gone
	case r.frozen:
		return Frozen
	default:
		return Running
	}
}

// Exit is how one run of a process ended.
type Exit struct {
	Name string    `json:"name"`
	PID  int       `json:"pid"`
	At   time.Time `json:"at"`
	Log  string    `json:"log"`
	// Status is the process's end as os.ProcessState says it: "exit
	// status 0", "signal: killed".
	Status string `json:"status"`
	// Cause is what this package did to end it: "kill" (SIGKILL),
	// "stop" (SIGTERM), "stop+kill" (SIGTERM, then SIGKILL after
	// Config.Grace), "reload" (an old HAProxy told to finish by its
	// successor), or "" if it ended on its own.
	Cause string `json:"cause,omitempty"`
	// Clean: it exited as a process told to stop should: status 0, or
	// for etcd and HAProxy also by the SIGTERM they were sent.
	Clean bool `json:"clean"`
}

// spawner starts every child from one OS thread that lives as long as the
// Cluster. Linux sends a child its Pdeathsig when the thread that started
// it ends, not the process; Go ends a thread when a goroutine locked to it
// returns, which any code in the process may do. This goroutine locks its
// thread and returns only from close, once every child is gone: should
// one remain, it gets its SIGKILL then.
type spawner struct {
	reqs chan spawnReq
	done chan struct{} // closed when loop has returned
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan<- error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *spawner) loop() {
	runtime.LockOSThread() // never unlocked: the thread ends with loop
	defer close(s.done)
	for r := range s.reqs {
		r.err <- r.cmd.Start()
	}
}

// start runs cmd.Start on the spawner's thread. It must not be called
// after close.
func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}

func (s *spawner) close() {
	close(s.reqs)
	<-s.done
}

// exitOf describes how r's process ended, from cmd.Wait's result.
func exitOf(p *proc, r *run, waitErr error) *Exit {
	e := &Exit{Name: p.name, PID: r.pid, At: time.Now(), Log: p.log, Cause: r.cause}
	ps := r.cmd.ProcessState
	if ps == nil {
		e.Status = fmt.Sprintf("wait: %v", waitErr)
		return e
	}
	e.Status = ps.String()
	e.Clean = ps.Success() || p.kind != kindReplica && endedByTERM(ps)
	return e
}

// tailOf returns the last n lines of the file at path, under a heading.
func tailOf(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("last lines of %s:\n%s", path, indent(strings.Join(lines, "\n")))
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
