package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ServerSample is what a server's /metrics says about its process.
type ServerSample struct {
	At time.Time
	// CPUSeconds is process_cpu_seconds_total.
	CPUSeconds float64
	// RSSBytes is process_resident_memory_bytes.
	RSSBytes float64
	// StatusDirty is legation_status_records_dirty, the node status
	// writes a Legation replica still owes etcd (its write budget spreads
	// them over seconds); -1 when the server has no such metric.
	StatusDirty float64
}

// statusDirtyMetric is the gauge of the status writes a replica still
// owes etcd.
const statusDirtyMetric = "legation_status_records_dirty"

// Scrape reads process_cpu_seconds_total and
// process_resident_memory_bytes from a Prometheus text /metrics page, and
// legation_status_records_dirty when it is there. The first two must be.
func Scrape(ctx context.Context, c *http.Client, url string) (ServerSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: metrics URL %q: %w", url, err)
	}
	// Text format: a protobuf or OpenMetrics page would not parse below.
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %s", url, resp.Status)
	}
	s := ServerSample{At: time.Now(), StatusDirty: -1}
	var cpu, rss bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || (name != "process_cpu_seconds_total" && name != "process_resident_memory_bytes" && name != statusDirtyMetric) {
			continue
		}
		// A timestamp may follow the value.
		val, _, _ = strings.Cut(strings.TrimSpace(val), " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return ServerSample{}, fmt.Errorf("loadgen: %s: %s: %w", url, name, err)
		}
		switch name {
		case "process_cpu_seconds_total":
			s.CPUSeconds, cpu = v, true
		case statusDirtyMetric:
			s.StatusDirty = v
		default:
			s.RSSBytes, rss = v, true
		}
	}
	if err := sc.Err(); err != nil {
		return ServerSample{}, fmt.Errorf("loadgen: GET %s: %w", url, err)
	}
	if !cpu || !rss {
		return ServerSample{}, fmt.Errorf("loadgen: %s has no process_cpu_seconds_total or process_resident_memory_bytes (is it the server's /metrics, with the process collector?)", url)
	}
	return s, nil
}

// scrapeSum scrapes each of urls (the replicas of a cluster) and adds
// their samples up: CPU, RSS, and the status writes owed by those that
// have the metric (-1 when none has).
func scrapeSum(ctx context.Context, c *http.Client, urls []string) (ServerSample, error) {
	sum := ServerSample{StatusDirty: -1}
	for _, u := range urls {
		s, err := Scrape(ctx, c, strings.TrimSpace(u))
		if err != nil {
			return ServerSample{}, err
		}
		sum.At = s.At
		sum.CPUSeconds += s.CPUSeconds
		sum.RSSBytes += s.RSSBytes
		if s.StatusDirty >= 0 {
			sum.StatusDirty = max(sum.StatusDirty, 0) + s.StatusDirty
		}
	}
	return sum, nil
}
