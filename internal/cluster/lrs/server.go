package lrs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/xds/limits"
)

// Authorizer decides which node ids the client of a stream may claim. Its
// method is called concurrently; ctx is the stream's.
type Authorizer interface {
	// Authorize returns nil if the client of ctx may claim node n of
	// group, else the error the stream ends with.
	Authorize(ctx context.Context, n *corev3.Node, group string) (<-chan struct{}, error)
}

// Config configures a Server.
type Config struct {
	// Client writes this replica's windows. Nil: the windows are kept in
	// memory (Windows) but never published.
	Client *clientv3.Client
	// Prefix is the etcd key prefix, starting and ending with '/'.
	Prefix string
	// Replica is this replica's name, in its windows' keys. Required.
	Replica string
	// Interval is the load_reporting_interval sent to every client
	// (--lrs-interval) and the length of a window. At least 1s. Zero: 10s.
	Interval time.Duration
	// Windows is how many of its last windows a replica keeps in etcd.
	// Zero: 6.
	Windows int
	// Clusters, if not empty, are the only clusters clients are asked to
	// report on; empty: send_all_clusters.
	Clusters []string
	// Known, if set, says whether node n (of group) can see cluster: the
	// reports of a cluster it cannot are skipped and counted
	// ("unknown_cluster"). Called concurrently; must not block. Nil:
	// every cluster is known.
	Known func(group, cluster string) bool
	// Group derives a node's group (for Known and Authorizer). Nil: "".
	Group func(*corev3.Node) string
	// Authorizer, if set, checks the node a stream claims.
	Authorizer Authorizer
	// MaxLocalities bounds the localities of one cluster's stats; more
	// are skipped and counted ("too_many_localities"). Zero: 100.
	MaxLocalities int
	// MaxClusters bounds the cluster stats of one report; more are
	// skipped and counted ("too_many_clusters"). Zero: 1,000.
	MaxClusters int
	// MaxClusterLabels bounds the distinct cluster label values of the
	// legation_lrs_* metrics; clusters beyond it count as "other". Zero:
	// 100.
	MaxClusterLabels int
	// MaxRate (--lrs-max-rate) bounds the requests (issued plus dropped)
	// one node may report per second, on average over a window: a
	// cluster's stats that would take the node past MaxRate times the
	// window's length, doubled for two reports of one interval that land
	// in one window, are refused whole and counted ("over_rate"). It keeps
	// a node from claiming absurd counts (up to 2^64) that drown the
	// honest ones. Zero: 1,000,000.
	MaxRate float64
	// MaxRowsPerNode (--lrs-max-rows-per-node) bounds the rows (one per
	// cluster, EDS service and locality) one node adds to a window: its
	// rows beyond are summed into one row of its own, of cluster
	// OtherCluster, and counted ("node_rows_folded"), so that one node
	// making up localities cannot fill a window and push the other nodes
	// into OtherNode. Zero: 200.
	MaxRowsPerNode int
	// MaxNodeIDLength (--max-node-id-length) bounds the node id a stream
	// claims, in bytes: a longer one ends the stream with
	// INVALID_ARGUMENT, counted ("node_id_length"). Unset: 1024; with no
	// bound, ids are still cut to 256 bytes in rows.
	MaxNodeIDLength limits.Bound[int]
	// Identity, if set, returns the identity of the client of a stream's
	// context (its certificate's, as the access rules name it; "" without
	// mTLS): rows are kept per node and identity, so that load is
	// attributed to who reported it. Called once per stream.
	Identity func(ctx context.Context) string
	// Logger gets publish failures (at Warn, once until they recover) and
	// per-stream events (at Debug). Nil: discard.
	Logger *slog.Logger
	// Registerer gets the metrics (legation_lrs_*). Nil: none.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults, without Client, Prefix or Replica.
func DefaultConfig() Config {
	return Config{
		Interval:         10 * time.Second, // Envoy's and grpc-go's usual
		Windows:          6,                // the last minute at the default interval
		MaxLocalities:    100,              // far more zones than a cluster spans
		MaxClusters:      1000,
		MaxClusterLabels: 100,
		MaxRate:          1e6, // far beyond one proxy's traffic, far below 2^64
		MaxRowsPerNode:   200, // 100 localities of two clusters, or 200 clusters of one
		MaxNodeIDLength:  limits.Max(1024),
	}
}

// maxReportInterval is the longest load_report_interval accepted: a
// report claiming more is absurd (a client's clock, or a lie) and is
// skipped ("bad_interval").
const maxReportInterval = time.Hour

func (c *Config) fill() {
	d := DefaultConfig()
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.Windows == 0 {
		c.Windows = d.Windows
	}
	if c.MaxLocalities == 0 {
		c.MaxLocalities = d.MaxLocalities
	}
	if c.MaxClusters == 0 {
		c.MaxClusters = d.MaxClusters
	}
	if c.MaxClusterLabels == 0 {
		c.MaxClusterLabels = d.MaxClusterLabels
	}
	if c.MaxRate == 0 {
		c.MaxRate = d.MaxRate
	}
	if c.MaxRowsPerNode == 0 {
		c.MaxRowsPerNode = d.MaxRowsPerNode
	}
	c.MaxNodeIDLength = c.MaxNodeIDLength.Or(d.MaxNodeIDLength)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the config, zero fields standing for their defaults.
func (c Config) Validate() error {
	c.fill()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("lrs: "+format, args...)) }
	if c.Replica == "" || strings.Contains(c.Replica, "/") {
		add("Replica %q must be a name without '/'", c.Replica)
	}
	if c.Client != nil && (!strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/")) {
		add("Prefix %q must start and end with '/'", c.Prefix)
	}
	if c.Interval < time.Second || c.Interval > maxReportInterval {
		add("Interval %s must be from 1s to %s", c.Interval, maxReportInterval)
	}
	if c.Windows < 1 || c.Windows > 1000 {
		add("Windows %d must be from 1 to 1000", c.Windows)
	}
	if !(c.MaxRate >= 1) || math.IsInf(c.MaxRate, 0) {
		add("MaxRate %v must be a finite number of requests per second, at least 1", c.MaxRate)
	}
	if c.MaxRowsPerNode < 1 || c.MaxRowsPerNode > MaxRows {
		add("MaxRowsPerNode %d must be from 1 to %d", c.MaxRowsPerNode, MaxRows)
	}
	if c.MaxLocalities < 1 || c.MaxClusters < 1 || c.MaxClusterLabels < 1 {
		add("MaxLocalities %d, MaxClusters %d and MaxClusterLabels %d must be positive", c.MaxLocalities, c.MaxClusters, c.MaxClusterLabels)
	}
	for _, cl := range c.Clusters {
		if cl == "" {
			add("Clusters has an empty name")
		}
	}
	return errors.Join(errs...)
}

// Server serves LRS streams and rolls their reports up into windows.
// StreamLoadStats is called concurrently, once per stream; Run once.
type Server struct {
	loadv3.UnimplementedLoadReportingServiceServer

	cfg     Config
	log     *slog.Logger
	metrics *metrics
	first   *loadv3.LoadStatsResponse // the one response every stream gets; never modified

	mu  sync.Mutex // guards cur and done
	cur *window
	// done are the closed windows not yet published, oldest first (at
	// most cfg.Windows: older ones are dropped when etcd is away).
	done []Window
	// now is the clock (tests move it).
	now func() time.Time
	// budget is the requests one node may report in a window (MaxRate).
	budget uint64
	// warnedWindow is the start (Unix ns) of the window in which a report
	// over MaxRate was last logged.
	warnedWindow atomic.Int64
}

var _ loadv3.LoadReportingServiceServer = (*Server)(nil)

// New returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	m, err := newMetrics(cfg.Registerer, cfg.MaxClusterLabels)
	if err != nil {
		return nil, err
	}
	first := &loadv3.LoadStatsResponse{LoadReportingInterval: durationpb.New(cfg.Interval)}
	if len(cfg.Clusters) == 0 {
		first.SendAllClusters = true
	} else {
		first.Clusters = append([]string(nil), cfg.Clusters...)
	}
	// Twice the window's worth: two reports of one interval can land in
	// one window when the client's clock and the window's are not aligned.
	budget := uint64(math.MaxUint64)
	if b := 2 * cfg.MaxRate * cfg.Interval.Seconds(); b < float64(math.MaxUint64) {
		budget = uint64(b)
	}
	return &Server{cfg: cfg, log: cfg.Logger.With("replica", cfg.Replica), metrics: m, first: first, now: time.Now, budget: budget}, nil
}

// StreamLoadStats serves one LRS stream: it reads the first request,
// which must name a node, answers it once with the clusters to report on
// and the interval, then accepts reports until the client ends the
// stream. A report's bad parts are skipped and counted; only a stream
// without a node, or whose node the Authorizer refuses (at the start, or
// again when its rules change), ends with an error.
func (s *Server) StreamLoadStats(st loadv3.LoadReportingService_StreamLoadStatsServer) error {
	ctx := st.Context()
	req, err := st.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	n := req.GetNode()
	group, recheck, err := s.admit(ctx, n)
	if err != nil {
		return err
	}
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	from := s.reporter(ctx, n, group)
	s.Accept(from, req)
	if err := st.Send(s.first); err != nil {
		return err
	}
	if recheck == nil {
		// Nothing can change the decision: no goroutine needed.
		for {
			req, err := st.Recv()
			if err != nil {
				return endOf(err)
			}
			s.Accept(from, req)
		}
	}
	return s.acceptWhileAuthorized(st, from, n, group, recheck)
}

// admit checks the node n of a stream's first request: it must have an
// id, printable (limits.CheckNodeID) and not longer than MaxNodeIDLength,
// that the Authorizer lets the stream of ctx claim. It returns n's group and the Authorizer's recheck
// channel (nil: the decision cannot change).
func (s *Server) admit(ctx context.Context, n *corev3.Node) (group string, recheck <-chan struct{}, err error) {
	if n.GetId() == "" {
		s.metrics.rejected.WithLabelValues("no_node").Inc()
		return "", nil, status.Error(codes.InvalidArgument, "lrs: the stream's first LoadStatsRequest has no node id")
	}
	if err := limits.CheckNodeID(n.GetId()); err != nil {
		s.metrics.rejected.WithLabelValues("node_id_text").Inc()
		return "", nil, status.Error(codes.InvalidArgument, "lrs: "+err.Error())
	}
	if b := s.cfg.MaxNodeIDLength; !b.Allows(len(n.GetId())) {
		max, _ := b.Limit()
		s.metrics.rejected.WithLabelValues("node_id_length").Inc()
		return "", nil, status.Errorf(codes.InvalidArgument, "lrs: node.id: an id of %d bytes is longer than the bound of %d (--max-node-id-length)", len(n.GetId()), max)
	}
	if s.cfg.Group != nil {
		group = s.cfg.Group(n)
	}
	recheck, err = s.authorize(ctx, n, group)
	return group, recheck, err
}

// reporter is who reports on the stream of ctx: node n of group, and the
// client's identity.
func (s *Server) reporter(ctx context.Context, n *corev3.Node, group string) Reporter {
	from := Reporter{Node: cut(n.GetId()), Group: group}
	if s.cfg.Identity != nil {
		from.Identity = cut(s.cfg.Identity(ctx))
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("LRS stream", "node", from.Node, "identity", from.Identity, "group", group)
	}
	return from
}

// acceptWhileAuthorized accepts the reports of st until it ends, or until
// the Authorizer, asked again each time recheck closes, refuses its node n.
func (s *Server) acceptWhileAuthorized(st loadv3.LoadReportingService_StreamLoadStatsServer, from Reporter, n *corev3.Node, group string, recheck <-chan struct{}) error {
	// The receive goroutine ends when the stream does: gRPC ends its
	// Recv once the handler returns.
	reqs := make(chan *loadv3.LoadStatsRequest)
	recvErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go receive(st, reqs, recvErr, done)
	for {
		select {
		case req := <-reqs:
			s.Accept(from, req)
		case err := <-recvErr:
			return endOf(err)
		case <-recheck:
			var err error
			if recheck, err = s.authorize(st.Context(), n, group); err != nil {
				return err
			}
		}
	}
}

// receive passes the requests of st to reqs until Recv fails, then its
// error to recvErr (buffered); it returns early once done is closed.
func receive(st loadv3.LoadReportingService_StreamLoadStatsServer, reqs chan<- *loadv3.LoadStatsRequest, recvErr chan<- error, done <-chan struct{}) {
	for {
		req, err := st.Recv()
		if err != nil {
			recvErr <- err
			return
		}
		select {
		case reqs <- req:
		case <-done:
			return
		}
	}
}

// authorize asks the Authorizer, if any, whether the stream of ctx may
// claim n, counting a refusal.
func (s *Server) authorize(ctx context.Context, n *corev3.Node, group string) (<-chan struct{}, error) {
	if s.cfg.Authorizer == nil {
		return nil, nil
	}
	recheck, err := s.cfg.Authorizer.Authorize(ctx, n, group)
	if err != nil {
		s.metrics.rejected.WithLabelValues("unauthorized").Inc()
	}
	return recheck, err
}

// endOf is what a stream whose Recv failed with err ends with: OK when
// the client closed its side.
func endOf(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// windowAt returns the window of now, closing the current one (into
// s.done) if now is past it. s.mu is held.
func (s *Server) windowAt(now time.Time) *window {
	if s.cur != nil && now.Before(s.cur.end) && !now.Before(s.cur.start) {
		return s.cur
	}
	s.closeCurrent()
	start := now.Truncate(s.cfg.Interval)
	s.cur = newWindow(start, start.Add(s.cfg.Interval))
	return s.cur
}

// closeCurrent moves the current window, if it has rows, to s.done.
// s.mu is held.
func (s *Server) closeCurrent() {
	if s.cur == nil {
		return
	}
	if len(s.cur.rows) > 0 {
		s.done = append(s.done, s.cur.freeze(s.cfg.Replica))
		if over := len(s.done) - s.cfg.Windows; over > 0 {
			s.done = append(s.done[:0], s.done[over:]...)
			s.metrics.windowsLost.Add(float64(over))
		}
	}
	s.cur = nil
}

// closed returns the windows closed by now and not yet taken, oldest
// first, and forgets them.
func (s *Server) closed(now time.Time) []Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && !now.Before(s.cur.end) {
		s.closeCurrent()
	}
	out := s.done
	s.done = nil
	return out
}

// requeue puts back windows a failed publish did not write, before any
// closed since, keeping the last cfg.Windows.
func (s *Server) requeue(ws []Window) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(ws, s.done...)
	if over := len(s.done) - s.cfg.Windows; over > 0 {
		s.done = append(s.done[:0], s.done[over:]...)
		s.metrics.windowsLost.Add(float64(over))
	}
}
