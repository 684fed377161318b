package loadgen

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Result is what Run measured; its JSON is xds-loadgen's -o json output
// (docs/development/load-testing.md). Times are in seconds, sizes in bytes.
type Result struct {
	Target    string    `json:"target"` // legation or gcp
	Mode      string    `json:"mode"`   // sotw or delta
	Streams   int       `json:"streams"`
	Conns     int       `json:"conns"` // 0: one per stream
	Clusters  int       `json:"clusters"`
	Endpoints int       `json:"endpoints"`
	Listeners int       `json:"listeners"`
	NackRatio float64   `json:"nack_ratio"`
	Started   time.Time `json:"started"`
	Seconds   float64   `json:"seconds"` // the whole run

	Sync    SyncResult     `json:"sync"`
	Idle    *IdleResult    `json:"idle,omitempty"` // absent without --idle or --metrics-url
	Updates []UpdateResult `json:"updates"`
	Overall Overall        `json:"overall"`

	StreamErrors int64          `json:"stream_errors"` // streams that ended, each then opened again
	Reconnects   int64          `json:"reconnects"`
	Nacks        int64          `json:"nacks"`
	Responses    int64          `json:"responses"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"` // stream end errors by text (the first 10 kinds)

	Server *ServerResult `json:"server,omitempty"` // absent without --metrics-url
	// PerEnvoy is what one simulated Envoy costs the server; absent
	// without --metrics-url.
	PerEnvoy *PerEnvoy   `json:"per_envoy,omitempty"`
	Etcd     *EtcdResult `json:"etcd,omitempty"` // absent without --etcd-metrics-url
	// Loadgen is the load generator's own CPU: on a machine it shares with
	// the server, what it took from it.
	Loadgen LoadgenResult `json:"loadgen"`
}

// LoadgenResult is the load generator's own CPU (user and system; zero
// where getrusage is not available), and its garbage collections during
// the updates: those it ran between two updates, once every client had
// the first (when its heap was half way to the next collection), and
// those the Go runtime started on its own, which may have overlapped a
// fan-out and delayed the receipts of that update.
type LoadgenResult struct {
	SyncCPUSeconds     float64 `json:"sync_cpu_seconds"`
	UpdatesCPUSeconds  float64 `json:"updates_cpu_seconds"`
	CollectionsBetween int     `json:"collections_between_updates"`
	CollectionsIn      int     `json:"collections_in_updates"`
}

// SyncResult is the initial sync: from the first stream opened to every
// client holding every cluster's endpoints.
type SyncResult struct {
	Version            int64   `json:"version"` // the fixture's commit
	Seconds            float64 `json:"seconds"`
	BytesPerClient     float64 `json:"bytes_per_client"`
	ResourcesPerClient float64 `json:"resources_per_client"`
}

// IdleResult is the server's CPU with every client synced and nothing
// written.
type IdleResult struct {
	Seconds            float64 `json:"seconds"`
	CPUSeconds         float64 `json:"cpu_seconds"`
	CPUMillisPerSecond float64 `json:"cpu_ms_per_s"`
	BytesPerClient     float64 `json:"bytes_per_client"` // received meanwhile (heartbeats, resends)
}

// Latency summarizes the write-to-receipt latencies of the clients that
// received an update: from when the write was sent to when the response
// carrying it arrived (and was ACKed or NACKed).
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// UpdateResult is one update.
type UpdateResult struct {
	Index   int       `json:"index"`   // from 1
	Cluster string    `json:"cluster"` // whose endpoints changed
	Version int64     `json:"version"` // etcd revision, or snapshot version
	Sent    time.Time `json:"sent"`    // when the write was sent
	// WriteSeconds is the write's round trip (etcd transaction, or control
	// call).
	WriteSeconds float64 `json:"write_seconds"`
	Received     int     `json:"received"` // clients that received it
	Missing      int     `json:"missing"`  // clients that did not within --update-timeout
	Latency      Latency `json:"latency"`  // from Sent to each receipt, over Received
	// BytesPerClient and ResourcesPerClient are what the clients received
	// from the commit to the last receipt, divided by the streams.
	BytesPerClient     float64 `json:"bytes_per_client"`
	ResourcesPerClient float64 `json:"resources_per_client"`
	Error              string  `json:"error,omitempty"` // why not every client received it
}

// Overall is every update together.
type Overall struct {
	Latency Latency `json:"latency"` // over every receipt of every update
	// AllReceivedMedian is the median over updates of the time until the
	// last client received it.
	AllReceivedMedian  float64 `json:"all_received_median"`
	Missing            int     `json:"missing"` // receipts missing, over every update
	BytesPerClient     float64 `json:"bytes_per_client_per_update"`
	ResourcesPerClient float64 `json:"resources_per_client_per_update"`
}

// EtcdResult is an etcd process's CPU (process_cpu_seconds_total of its
// /metrics) over the idle measure and over the updates.
type EtcdResult struct {
	IdleCPUMillisPerSecond float64 `json:"idle_cpu_ms_per_s"` // 0 without an idle measure
	UpdatesCPUSeconds      float64 `json:"updates_cpu_seconds"`
}

// PerEnvoy is the server's figures divided by the simulated Envoys (the
// streams): what each costs it, whatever the fleet's size.
type PerEnvoy struct {
	// RSSBytes is the server's resident memory after the sync, less what
	// it held before the fixture and the streams, per Envoy.
	RSSBytes float64 `json:"rss_bytes"`
	// IdleCPUMicrosPerSecond is the server's idle CPU per Envoy, in µs a
	// second (zero without an idle measure).
	IdleCPUMicrosPerSecond float64 `json:"idle_cpu_us_per_s"`
	// CPUMicrosPerUpdate is the server's CPU per update per Envoy.
	CPUMicrosPerUpdate float64 `json:"cpu_us_per_update"`
	// BytesPerUpdate is what an Envoy received per update.
	BytesPerUpdate float64 `json:"bytes_per_update"`
}

// perEnvoy divides the server's figures by the streams.
func (r *Result) perEnvoy() *PerEnvoy {
	if r.Server == nil {
		return nil
	}
	p := &PerEnvoy{
		RSSBytes:           r.Server.RSSBytesPerStream,
		CPUMicrosPerUpdate: r.Server.CPUSecondsPerUpdatePerClient * 1e6,
		BytesPerUpdate:     r.Overall.BytesPerClient,
	}
	if r.Idle != nil && r.Streams > 0 {
		p.IdleCPUMicrosPerSecond = 1000 * r.Idle.CPUMillisPerSecond / float64(r.Streams)
	}
	return p
}

// ServerResult is read from the server's /metrics
// (process_cpu_seconds_total, process_resident_memory_bytes).
type ServerResult struct {
	RSSBytesBefore    float64 `json:"rss_bytes_before"` // before the fixture and the streams
	RSSBytesAfterSync float64 `json:"rss_bytes_after_sync"`
	RSSBytesAfter     float64 `json:"rss_bytes_after"` // after the updates
	// RSSBytesPerStream is (RSSBytesAfterSync - RSSBytesBefore) / streams.
	RSSBytesPerStream float64 `json:"rss_bytes_per_stream"`
	SyncCPUSeconds    float64 `json:"sync_cpu_seconds"` // fixture and initial sync
	UpdatesCPUSeconds float64 `json:"updates_cpu_seconds"`
	UpdatesSeconds    float64 `json:"updates_seconds"`
	// CPUSecondsPerUpdatePerClient is UpdatesCPUSeconds / updates /
	// streams.
	CPUSecondsPerUpdatePerClient float64 `json:"cpu_seconds_per_update_per_client"`
}

func summarize(s []float64) Latency {
	if len(s) == 0 {
		return Latency{}
	}
	slices.Sort(s)
	return Latency{P50: quantile(s, 0.5), P99: quantile(s, 0.99), Max: s[len(s)-1]}
}

// quantile is the nearest-rank quantile q of sorted s.
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func overall(us []UpdateResult, all []float64) Overall {
	o := Overall{Latency: summarize(all)}
	if len(us) == 0 {
		return o
	}
	maxes := make([]float64, 0, len(us))
	for _, u := range us {
		maxes = append(maxes, u.Latency.Max)
		o.Missing += u.Missing
		o.BytesPerClient += u.BytesPerClient / float64(len(us))
		o.ResourcesPerClient += u.ResourcesPerClient / float64(len(us))
	}
	slices.Sort(maxes)
	o.AllReceivedMedian = quantile(maxes, 0.5)
	return o
}

// WriteText writes r for people: one line per update, then the totals.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "%s %s: %d streams (%s), %d clusters x %d endpoints, %d listeners, NACK ratio %g\n",
		r.Target, r.Mode, r.Streams, connsText(r.Conns), r.Clusters, r.Endpoints, r.Listeners, r.NackRatio)
	fmt.Fprintf(w, "sync: %.2fs, %.0f bytes and %.0f resources per client\n", r.Sync.Seconds, r.Sync.BytesPerClient, r.Sync.ResourcesPerClient)
	if r.Idle != nil {
		fmt.Fprintf(w, "idle: server CPU %.1f ms/s over %.1fs, %.0f bytes per client received\n", r.Idle.CPUMillisPerSecond, r.Idle.Seconds, r.Idle.BytesPerClient)
	}
	for _, u := range r.Updates {
		fmt.Fprintf(w, "update %3d %s v%d (write %.3fs): %d received, %d missing, p50 %.3fs p99 %.3fs max %.3fs, %.0f bytes %.2f resources per client%s\n",
			u.Index, u.Cluster, u.Version, u.WriteSeconds, u.Received, u.Missing, u.Latency.P50, u.Latency.P99, u.Latency.Max,
			u.BytesPerClient, u.ResourcesPerClient, errText(u.Error))
	}
	o := r.Overall
	fmt.Fprintf(w, "overall: p50 %.3fs p99 %.3fs max %.3fs, all received (median) %.3fs, %d missing, %.0f bytes %.2f resources per client per update\n",
		o.Latency.P50, o.Latency.P99, o.Latency.Max, o.AllReceivedMedian, o.Missing, o.BytesPerClient, o.ResourcesPerClient)
	fmt.Fprintf(w, "streams: %d errors, %d reconnects, %d NACKs, %d responses\n", r.StreamErrors, r.Reconnects, r.Nacks, r.Responses)
	for k, n := range r.ErrorKinds {
		fmt.Fprintf(w, "  %dx %s\n", n, k)
	}
	if s := r.Server; s != nil {
		if e := r.Etcd; e != nil {
			fmt.Fprintf(w, "etcd: CPU %.1f ms/s idle, %.2fs updates\n", e.IdleCPUMillisPerSecond, e.UpdatesCPUSeconds)
		}
		fmt.Fprintf(w, "server: RSS %.0f MiB after sync (%.0f before, %.0f after the updates; %.1f KiB per stream), CPU %.2fs sync, %.2fs updates, %.2f µs per update per client\n",
			s.RSSBytesAfterSync/(1<<20), s.RSSBytesBefore/(1<<20), s.RSSBytesAfter/(1<<20), s.RSSBytesPerStream/1024,
			s.SyncCPUSeconds, s.UpdatesCPUSeconds, s.CPUSecondsPerUpdatePerClient*1e6)
	}
	if p := r.PerEnvoy; p != nil {
		fmt.Fprintf(w, "per Envoy: %.1f KiB of server memory, %.2f µs/s of idle server CPU, %.1f µs of server CPU and %.0f bytes per update\n",
			p.RSSBytes/1024, p.IdleCPUMicrosPerSecond, p.CPUMicrosPerUpdate, p.BytesPerUpdate)
	}
	fmt.Fprintf(w, "xds-loadgen's own CPU: %.2fs sync, %.2fs updates\n", r.Loadgen.SyncCPUSeconds, r.Loadgen.UpdatesCPUSeconds)
}

func connsText(n int) string {
	if n == 0 {
		return "one connection each"
	}
	return fmt.Sprintf("%d connections", n)
}

func errText(e string) string {
	if e == "" {
		return ""
	}
	return " (" + e + ")"
}
